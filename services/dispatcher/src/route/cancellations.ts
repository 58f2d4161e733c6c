/**
 * Requests in flight on this dispatcher, by reply inbox, so a `route.cancel` from intake
 * (the client went away) can abort the node call and free its slot at once.
 */
export interface Cancellations {
  /** Registers a request; the returned signal fires when intake cancels it. */
  register(inbox: string): AbortSignal;
  release(inbox: string): void;
  cancel(inbox: string): boolean;
  size(): number;
}

export function createCancellations(): Cancellations {
  const controllers = new Map<string, AbortController>();
  return {
    register(inbox) {
      const controller = new AbortController();
      controllers.set(inbox, controller);
      return controller.signal;
    },
    release(inbox) {
      controllers.delete(inbox);
    },
    cancel(inbox) {
      const controller = controllers.get(inbox);
      if (!controller) return false; // served by another replica, or already finished
      controller.abort(new Error("client went away"));
      controllers.delete(inbox);
      return true;
    },
    size: () => controllers.size,
  };
}
