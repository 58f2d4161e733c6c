/**
 * Client requests this process is answering, counted from arrival until their response is
 * closed (sent, hijacked and streamed, or abandoned by the client): what a graceful stop
 * waits for.
 */
export interface InFlight {
  track(res: { once(event: "close", listener: () => void): unknown }): void;
  count(): number;
}

export function createInFlight(): InFlight {
  let open = 0;
  return {
    track(res) {
      open++;
      res.once("close", () => open--);
    },
    count: () => open,
  };
}
