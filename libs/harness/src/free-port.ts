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
