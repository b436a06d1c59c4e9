/**
 * A local SMTP server for tests (smtp-server, on 127.0.0.1, a free port, no TLS, no auth): keeps
 * every message it accepts with its envelope and headers, and lets a test wait for messages (an
 * event per accepted message, never a sleep).
 */
import { SMTPServer } from "smtp-server";

export interface ReceivedMail {
  from: string;
  to: string[];
  /** Header names lower-cased, folded lines joined. */
  headers: Record<string, string>;
  raw: string;
}

export interface SmtpFixture {
  readonly url: string;
  readonly mails: ReceivedMail[];
  /** Resolves once `pred` holds over the mails received so far (checked on each arrival). */
  waitFor(
    pred: (mails: ReceivedMail[]) => boolean,
    timeoutMs: number,
    phase: string,
  ): Promise<void>;
  close(): Promise<void>;
}

function parseHeaders(raw: string): Record<string, string> {
  const end = raw.indexOf("\r\n\r\n");
  const head = (end < 0 ? raw : raw.slice(0, end)).replace(/\r\n[ \t]+/g, " ");
  const out: Record<string, string> = {};
  for (const line of head.split("\r\n")) {
    const i = line.indexOf(":");
    if (i > 0) out[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim();
  }
  return out;
}

export async function startSmtp(): Promise<SmtpFixture> {
  const mails: ReceivedMail[] = [];
  const waiters = new Set<() => void>();
  const server = new SMTPServer({
    authOptional: true,
    disabledCommands: ["STARTTLS", "AUTH"],
    logger: false,
    size: 1024 * 1024,
    onData(stream, session, callback) {
      const chunks: Buffer[] = [];
      stream.on("data", (c: Buffer) => chunks.push(c));
      stream.on("end", () => {
        const raw = Buffer.concat(chunks).toString("utf8");
        mails.push({
          from: session.envelope.mailFrom ? session.envelope.mailFrom.address : "",
          to: session.envelope.rcptTo.map((r) => r.address),
          headers: parseHeaders(raw),
          raw,
        });
        callback();
        for (const w of [...waiters]) w();
      });
    },
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const addr = server.server.address();
  const port = typeof addr === "object" && addr ? addr.port : 0;
  return {
    url: `smtp://127.0.0.1:${port}`,
    mails,
    waitFor(pred, timeoutMs, phase) {
      return new Promise<void>((resolve, reject) => {
        const check = () => {
          if (!pred(mails)) return;
          waiters.delete(check);
          clearTimeout(t);
          resolve();
        };
        const t = setTimeout(() => {
          waiters.delete(check);
          reject(
            new Error(
              `timed out after ${timeoutMs} ms waiting for ${phase} (${mails.length} mails so far)`,
            ),
          );
        }, timeoutMs);
        waiters.add(check);
        check();
      });
    },
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
}
