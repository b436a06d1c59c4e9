/**
 * Serves the API on a socket with @hono/node-server. Port 0 picks a free port; the returned
 * `url` is the one to give clients (and to record in .kairos/dev.json).
 */
import { serve, type ServerType } from "@hono/node-server";
import type { AddressInfo } from "node:net";
import type { Hono } from "hono";
import type { ApiEnv } from "./auth.ts";

/** A running API server. */
export interface ApiServer {
  readonly url: string;
  readonly port: number;
  /** Stops accepting connections and closes idle ones; resolves when the server is closed. */
  close(): Promise<void>;
}

/** Where to listen; loopback by default. */
export interface ServeOptions {
  host?: string;
  port?: number;
}

/** Starts listening; resolves once the socket is bound. */
export function serveApi(app: Hono<ApiEnv>, opts: ServeOptions = {}): Promise<ApiServer> {
  const host = opts.host ?? "127.0.0.1";
  return new Promise((resolve, reject) => {
    let server: ServerType | undefined = undefined;
    const onError = (e: unknown): void => reject(e instanceof Error ? e : new Error(String(e)));
    server = serve(
      { fetch: app.fetch, hostname: host, port: opts.port ?? 0 },
      (info: AddressInfo) => {
        server?.off("error", onError);
        const urlHost = info.family === "IPv6" ? `[${info.address}]` : info.address;
        const s = server;
        resolve({
          url: `http://${urlHost}:${info.port}`,
          port: info.port,
          close: () =>
            new Promise<void>((res, rej) => {
              if (s === undefined) return res();
              s.close((err) => (err ? rej(err) : res()));
              if ("closeIdleConnections" in s) s.closeIdleConnections();
            }),
        });
      },
    );
    server.once("error", onError);
  });
}
