import { createServer } from "node:net";

/** Ports this process has handed out, so two servers of one test never share one. */
const handedOut = new Set<number>();

/**
 * A TCP port on `host` that is free now, for a server the caller starts (and may stop and
 * start again on it). It is taken below Linux's ephemeral range (32768 and up), never from
 * `listen(0)`: an outgoing connection or another process's `listen(0)` is handed ephemeral
 * ports, so neither can take this one between the check and the server's bind, or while a
 * restarted server is down. Both were seen as EADDRINUSE in full runs, where many test files
 * open connections at once.
 */
export async function findFreePort(host = "127.0.0.1"): Promise<number> {
  for (;;) {
    const port = 20_000 + Math.floor(Math.random() * 12_000);
    if (handedOut.has(port)) continue;
    handedOut.add(port); // before the check, so a concurrent call cannot pick it too
    if (await isFree(port, host)) return port;
    handedOut.delete(port);
  }
}

function isFree(port: number, host: string): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.unref();
    server.once("error", () => resolve(false));
    server.listen(port, host, () => server.close(() => resolve(true)));
  });
}
