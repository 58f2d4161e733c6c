import { connect } from "node:net";
import type { Socket } from "node:net";

/**
 * Just enough of the NATS client protocol to check a server from a test without a client
 * library: read the INFO greeting, publish, and make requests.
 */
export interface RawNats {
  info: Record<string, unknown>;
  request(subject: string, payload: string, timeoutMs?: number): Promise<string>;
  close(): void;
}

export function rawConnect(host: string, port: number): Promise<RawNats> {
  return new Promise((resolve, reject) => {
    const socket: Socket = connect({ host, port });
    let buffer = Buffer.alloc(0);
    let info: Record<string, unknown> | undefined;
    let nextSid = 1;
    const waiting = new Map<string, (payload: string) => void>();

    const parse = () => {
      for (;;) {
        const eol = buffer.indexOf("\r\n");
        if (eol < 0) return;
        const line = buffer.subarray(0, eol).toString("utf8");
        if (line.startsWith("MSG ")) {
          // MSG <subject> <sid> [reply-to] <#bytes>
          const parts = line.split(" ");
          const size = Number(parts[parts.length - 1]);
          if (buffer.length < eol + 2 + size + 2) return;
          const payload = buffer.subarray(eol + 2, eol + 2 + size).toString("utf8");
          buffer = buffer.subarray(eol + 2 + size + 2);
          waiting.get(parts[2]!)?.(payload);
          continue;
        }
        buffer = buffer.subarray(eol + 2);
        if (line.startsWith("INFO ")) {
          info = JSON.parse(line.slice(5)) as Record<string, unknown>;
          socket.write('CONNECT {"verbose":false,"pedantic":false,"protocol":1}\r\nPING\r\n');
        } else if (line === "PING") {
          socket.write("PONG\r\n");
        } else if (line === "PONG" && info) {
          const greeted = info;
          resolve({
            info: greeted,
            request(subject, payload, timeoutMs = 5000) {
              const sid = String(nextSid++);
              const inbox = `_INBOX.rawtest.${sid}`;
              return new Promise<string>((res, rej) => {
                const timer = setTimeout(() => rej(new Error(`no reply on ${subject}`)), timeoutMs);
                waiting.set(sid, (reply) => {
                  clearTimeout(timer);
                  waiting.delete(sid);
                  socket.write(`UNSUB ${sid}\r\n`);
                  res(reply);
                });
                const bytes = Buffer.byteLength(payload);
                socket.write(
                  `SUB ${inbox} ${sid}\r\nPUB ${subject} ${inbox} ${bytes}\r\n${payload}\r\n`,
                );
              });
            },
            close: () => socket.destroy(),
          });
        } else if (line.startsWith("-ERR")) {
          reject(new Error(line));
        }
      }
    };

    socket.on("data", (chunk: Buffer) => {
      buffer = Buffer.concat([buffer, chunk]);
      parse();
    });
    socket.on("error", reject);
  });
}

/** Reads only the greeting line, the way the first byte of any NATS session looks. */
export function readInfoLine(host: string, port: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host, port });
    let received = "";
    socket.on("data", (chunk: Buffer) => {
      received += chunk.toString("utf8");
      const eol = received.indexOf("\r\n");
      if (eol >= 0) {
        socket.destroy();
        resolve(received.slice(0, eol));
      }
    });
    socket.on("error", reject);
  });
}
