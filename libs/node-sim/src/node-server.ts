import { once } from "node:events";
import { createServer } from "node:http";
import type { IncomingMessage, ServerResponse } from "node:http";
import { createSecureServer as createH2Server, createServer as createH2cServer } from "node:http2";
import type {
  Http2SecureServer,
  Http2Server,
  Http2ServerRequest,
  Http2ServerResponse,
  Http2Session,
} from "node:http2";
import { createServer as createHttpsServer } from "node:https";
import type { Server as HttpsServer } from "node:https";
import type { Server as NetServer, Socket } from "node:net";
import { createSniffingServer } from "./h2c-sniff.ts";
import { isHttp2 } from "./http-reply.ts";
import { createTlsIdentity } from "./tls-identity.ts";
import type { TlsIdentity } from "./tls-identity.ts";
import type { SimProtocol } from "./types.ts";
import { SimInputError } from "./validate.ts";

type Handler = (
  req: IncomingMessage | Http2ServerRequest,
  res: ServerResponse | Http2ServerResponse,
) => void;

/**
 * A node's listening server: its protocol, the TLS key it presents (which the `key_swap`
 * fault replaces) and every connection it holds, so that a swap or `close()` can end them.
 */
export interface NodeServer {
  /** The key the server presents now; undefined: plain HTTP. */
  servedIdentity(): TlsIdentity | undefined;
  /** The key hash the connection of `req` was opened with (TLS nodes). */
  tlsKeyOf(req: IncomingMessage): string | undefined;
  /**
   * Whether `req` came on an HTTP/1.1 connection opened before a key swap: it should end
   * after this answer (HTTP/2 sessions are closed gracefully by the swap itself).
   */
  openedBeforeKeySwap(req: IncomingMessage): boolean;
  /**
   * The `key_swap` fault: a key from outside the TD from now on. Idle connections are
   * dropped at once, busy ones after their answer.
   *
   * @throws {SimInputError} on a node without TLS.
   */
  swapKey(): void;
  /** Resolves with the node's URL once it listens; rejects with the listen error. */
  listen(port: number, host: string): Promise<{ url: string; port: number }>;
  /** Stops listening and destroys every connection, busy ones included. */
  close(): Promise<void>;
}

/** The server for `protocol`, presenting `identity` (none: plain HTTP), answering with `handler`. */
export function createNodeServer(
  nodeId: string,
  protocol: SimProtocol,
  identity: TlsIdentity | undefined,
  handler: Handler,
): NodeServer {
  let served = identity;
  const { server, http2 } = listeningServer(protocol, identity, handler);
  // The key each connection was opened with: its socket (HTTP/1.1) or its session (HTTP/2).
  const keyOfConnection = new WeakMap<object, string>();
  const sessions = new Set<Http2Session>();
  // Every TCP connection, so that close() can end those no HTTP server has taken yet.
  const sockets = new Set<Socket>();
  if (protocol !== "http1") {
    server.on("connection", (socket: Socket) => {
      socket.setNoDelay(true);
      sockets.add(socket);
      socket.once("close", () => sockets.delete(socket));
    });
  }
  http2?.on("session", (session: Http2Session) => {
    sessions.add(session);
    if (served) keyOfConnection.set(session, served.keySha256);
    session.once("close", () => sessions.delete(session));
  });
  if (served !== undefined) {
    // HTTP/1.1 over TLS (an h2 node's HTTP/1.1 clients included, chosen by ALPN).
    server.on("secureConnection", (socket: Socket) => {
      if (served) keyOfConnection.set(socket, served.keySha256);
    });
  }

  /** What a request arrived on: the unit a key swap or a reset ends. */
  const connectionOf = (req: IncomingMessage): object =>
    isHttp2(req) ? (req as unknown as Http2ServerRequest).stream.session! : req.socket;

  return {
    servedIdentity: () => served,
    tlsKeyOf: (req) => keyOfConnection.get(connectionOf(req)),
    openedBeforeKeySwap(req) {
      const key = isHttp2(req) ? undefined : keyOfConnection.get(req.socket);
      return key !== undefined && key !== served?.keySha256;
    },
    swapKey() {
      if (served === undefined || !("setSecureContext" in server)) {
        throw new SimInputError(
          "invalid_fault",
          "fault.kind: key_swap needs a TLS node",
          "fault.kind",
        );
      }
      served = createTlsIdentity(nodeId);
      server.setSecureContext({ key: served.keyPem, cert: served.certPem });
      if ("closeIdleConnections" in server) server.closeIdleConnections();
      // GOAWAY: open streams finish, no new ones start, then the session ends.
      for (const session of sessions) session.close();
    },
    async listen(port, host) {
      server.listen(port, host);
      await once(server, "listening");
      const address = server.address();
      if (address === null || typeof address === "string") {
        throw new Error("sim node: server has no TCP address");
      }
      const name = address.family === "IPv6" ? `[${address.address}]` : address.address;
      const url = `${served === undefined ? "http" : "https"}://${name}:${address.port}`;
      return { url, port: address.port };
    },
    close() {
      return new Promise<void>((resolve) => {
        server.close(() => resolve());
        if ("closeAllConnections" in server) server.closeAllConnections();
        for (const session of sessions) session.destroy();
        for (const socket of sockets) socket.destroy();
      });
    },
  };
}

/**
 * The listening server for `protocol`, and the HTTP/2 server behind it. An HTTP/2 node also
 * answers HTTP/1.1 on the same port, as real ones do for health probes: `h2` by ALPN, `h2c`
 * told apart by the connection preface.
 */
function listeningServer(
  protocol: SimProtocol,
  identity: TlsIdentity | undefined,
  handler: Handler,
): {
  server: NetServer | HttpsServer | Http2SecureServer;
  http2?: Http2Server | Http2SecureServer;
} {
  const tls = identity === undefined ? undefined : { key: identity.keyPem, cert: identity.certPem };
  if (protocol === "h2c") {
    const http2 = createH2cServer(handler);
    return { server: createSniffingServer(createServer(handler), http2), http2 };
  }
  if (protocol === "h2") {
    const http2 = createH2Server({ ...tls, allowHTTP1: true }, handler);
    return { server: http2, http2 };
  }
  const server =
    tls === undefined
      ? createServer({ noDelay: true }, handler)
      : createHttpsServer({ noDelay: true, ...tls }, handler);
  return { server };
}
