import type { ServerResponse } from "node:http";

/**
 * Writes `block` to `res` again and again until `totalBytes` are out or the connection
 * closes, waiting for `drain` whenever the socket is full: a test server's oversized or
 * endless answer, without holding it in memory. Ends the response when done.
 */
export function pourResponse(res: ServerResponse, block: Buffer, totalBytes: number): void {
  let sent = 0;
  const more = () => {
    while (sent < totalBytes && !res.destroyed) {
      sent += block.length;
      if (!res.write(block)) return void res.once("drain", more);
    }
    if (!res.destroyed) res.end();
  };
  res.once("close", () => (sent = totalBytes));
  more();
}
