/**
 * How a process authenticates to NATS: the credentials file's shape and the TLS files. A leaf of
 * the cluster area (it imports nothing), so the node config (config.ts) can name these options
 * without importing the connection code (nats.ts), which imports the config's roles back through
 * nats-permissions.ts.
 */
/** What a credentials file holds. */
export interface NatsCredentials {
  user: string;
  password: string;
  /** Default `_INBOX_<user>`. */
  inbox_prefix?: string;
  /**
   * API users only: the seed of the account nkey that signs the auth callout's answers
   * (src/nats-api/auth-callout.ts; nats-accounts.ts). An API node with it admits service identities.
   */
  callout_issuer_seed?: string;
  /** API users only: the curve key seed that opens the callout's requests (they carry secrets) and seals its answers. */
  callout_xkey_seed?: string;
}

export interface NatsTlsOptions {
  /** CA certificate(s) (PEM) the server's certificate must chain to. */
  readonly caFile?: string;
  /** Client certificate and key (PEM) for servers that verify clients. */
  readonly certFile?: string;
  readonly keyFile?: string;
}

/** How a process authenticates to NATS; part of the validated node config. */
export interface NatsAuthOptions {
  /** A credentials file (`NatsCredentials` as JSON). Unset: no credentials (refused by a secured server). */
  readonly credsFile?: string;
  /** TLS for the client connection. Unset: plain TCP unless the URL says `tls://`. */
  readonly tls?: NatsTlsOptions;
}
