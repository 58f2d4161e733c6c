import type { NatsConnection, PublishOptions } from "@nats-io/nats-core";

/**
 * Publishes made during one turn of the event loop, handed to the NATS client together when
 * the turn ends (`setImmediate`). The client writes its buffer to the socket at every
 * microtask checkpoint, and Node reaches one after every socket callback: sixteen requests
 * read, or sixteen node answers received, in one turn would cost sixteen socket writes (on
 * loopback each also runs the receiving side's network stack), instead of one. The delay is
 * the rest of the current turn, microseconds. Order among these publishes is kept, so one
 * request's frames, and a route request and its cancel, never overtake each other.
 */
export interface TurnPublisher {
  /** Queues a publish; `onFailed` learns if the client refused it (a closed connection). */
  publish(
    subject: string,
    data: Uint8Array,
    options: PublishOptions,
    onFailed?: (err: unknown) => void,
  ): void;
  /** Hands everything queued to the client now (before a drain or a close). */
  flushNow(): void;
}

interface Queued {
  subject: string;
  data: Uint8Array;
  options: PublishOptions;
  onFailed: ((err: unknown) => void) | undefined;
}

const publishers = new WeakMap<NatsConnection, TurnPublisher>();

/** The one turn publisher of a connection: everything it queues shares one order. */
export function turnPublisherOf(nc: NatsConnection): TurnPublisher {
  let publisher = publishers.get(nc);
  if (!publisher) {
    publisher = createTurnPublisher(nc);
    publishers.set(nc, publisher);
  }
  return publisher;
}

function createTurnPublisher(nc: NatsConnection): TurnPublisher {
  let queue: Queued[] = [];
  let scheduled = false;
  const flushNow = () => {
    scheduled = false;
    const batch = queue;
    queue = [];
    for (const q of batch) {
      try {
        nc.publish(q.subject, q.data, q.options);
      } catch (err) {
        // Only a closed or draining connection refuses: the message is lost either way, and
        // whoever waits for it has its own bound (a timeout, a liveness sweep).
        q.onFailed?.(err);
      }
    }
  };
  return {
    publish(subject, data, options, onFailed) {
      queue.push({ subject, data, options, onFailed });
      if (!scheduled) {
        scheduled = true;
        setImmediate(flushNow);
      }
    },
    flushNow,
  };
}
