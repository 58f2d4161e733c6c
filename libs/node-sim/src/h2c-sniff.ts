// One plain port for HTTP/2 by prior knowledge and HTTP/1.1, told apart by the first bytes, as
// h2c servers (envoy, hypercorn, nginx with `http2 on`) do: a fleet's health probes speak
// HTTP/1.1 to the same endpoint that inference speaks h2c to.
import { Duplex } from "node:stream";
import { createServer as createNetServer } from "node:net";
import type { Server as NetServer, Socket } from "node:net";

/** The start of the HTTP/2 connection preface (RFC 9113 §3.4): `PRI * HTTP/2.0`. */
const PREFACE_START = Buffer.from("PRI ", "latin1");

/** Where a connection goes once its protocol is known. */
export interface ConnectionTarget {
  emit(event: "connection", socket: Duplex): boolean;
}

/**
 * A TCP server that hands each connection to `http2` or `http1` according to its first bytes.
 * Node's HTTP servers read a real socket's handle directly, so bytes taken off it to look at
 * cannot be put back: the chosen server gets a stream that yields them first, then the rest.
 */
export function createSniffingServer(http1: ConnectionTarget, http2: ConnectionTarget): NetServer {
  return createNetServer({ noDelay: true }, (socket) => {
    socket.on("error", () => socket.destroy());
    socket.once("data", (first: Buffer) => {
      const h2 = first.subarray(0, PREFACE_START.length).equals(PREFACE_START);
      (h2 ? http2 : http1).emit("connection", replaying(socket, first));
    });
  });
}

function replaying(socket: Socket, first: Buffer): Duplex {
  const stream = new Duplex({
    read: () => void socket.resume(),
    write: (chunk: Buffer, _encoding, done) => void socket.write(chunk, done),
    final: (done) => void socket.end(done),
    destroy: (error, done) => {
      socket.destroy(error ?? undefined);
      done(error);
    },
  });
  stream.push(first);
  socket.on("data", (chunk: Buffer) => {
    if (!stream.push(chunk)) socket.pause();
  });
  socket.once("end", () => stream.push(null));
  socket.once("close", () => stream.destroy());
  return stream;
}
