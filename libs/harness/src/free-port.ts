import { createServer } from "node:net";
import type { AddressInfo } from "node:net";

/**
 * A TCP port that was free a moment ago on `host`. Another process may take it before the
 * caller binds it, so prefer binding port 0 directly where the server allows it.
 */
export function findFreePort(host = "127.0.0.1"): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.once("error", reject);
    server.listen(0, host, () => {
      const { port } = server.address() as AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

/** Ports this process has handed out, so two servers of one test never share one. */
const handedOut = new Set<number>();

/**
 * A free port for a server that will be stopped and started again on the same port (a
 * nats-server restart, a cluster member killed and restarted). It is taken below Linux's
 * ephemeral range (32768 and up): an outgoing connection or a `listen(0)` elsewhere can
 * then never be handed the port while the server is down (seen as EADDRINUSE on restart).
 */
export async function findRestartablePort(host = "127.0.0.1"): Promise<number> {
  for (;;) {
    const port = 20_000 + Math.floor(Math.random() * 12_000);
    if (handedOut.has(port) || !(await isFree(port, host))) continue;
    handedOut.add(port);
    return port;
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
