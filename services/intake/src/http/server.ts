import { createServer as createHttpServer } from "node:http";
import type { IncomingMessage, Server as HttpServer, ServerResponse } from "node:http";
import { createSecureServer, createServer as createH2Server } from "node:http2";
import type { Http2ServerRequest, Http2ServerResponse, Http2Session } from "node:http2";
import type { Socket } from "node:net";

/**
 * The HTTP listener under the intake app.
 *
 * - With a certificate: one TLS server offering `h2` and `http/1.1` by ALPN.
 * - Without: cleartext HTTP/1.1, plus h2c with prior knowledge. Node's HTTP/2 server cannot
 *   also speak HTTP/1.1 in cleartext, so each new connection's first bytes are read: the
 *   HTTP/2 connection preface hands the socket to an HTTP/2 server, anything else to the
 *   HTTP/1.1 server, both serving the same handler. (The `Upgrade: h2c` dance is not offered;
 *   clients that speak h2c use prior knowledge.)
 *
 * HTTP/1.1 connections get Node's header and whole-request timeouts; HTTP/2 sessions that
 * stay idle are closed after `idleTimeoutMs`.
 */

export interface ServerOptions {
  tls: { key: Buffer; cert: Buffer } | undefined;
  h2c: boolean;
  /** Slow-header (slowloris) cutoff for HTTP/1.1. */
  headersTimeoutMs: number;
  /** Cutoff for receiving a whole HTTP/1.1 request, headers and body. */
  requestTimeoutMs: number;
  /** Idle keep-alive connections and HTTP/2 sessions are closed after this. */
  idleTimeoutMs: number;
}

type Handler = (req: IncomingMessage, res: ServerResponse) => void;
type H2Handler = (req: Http2ServerRequest, res: Http2ServerResponse) => void;

/** The HTTP/2 connection preface (RFC 9113 §3.4) that starts every h2c connection. */
const PREFACE = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "latin1");

/** How long open HTTP/2 streams may still finish once the server is closing. */
const SHUTDOWN_GRACE_MS = 5_000;

const h1Options = (o: ServerOptions) => ({
  headersTimeout: o.headersTimeoutMs,
  requestTimeout: o.requestTimeoutMs,
  keepAliveTimeout: o.idleTimeoutMs,
  // Node only checks the two timeouts above this often (default 30 s).
  connectionsCheckingInterval: Math.max(100, Math.min(1_000, o.headersTimeoutMs / 2)),
});

/**
 * A fastify `serverFactory` building the listener described above. Fastify's handler
 * serves HTTP/2 compatibility requests as well as HTTP/1.1 ones; the app is typed for
 * HTTP/1.1 and only uses what both request and response kinds share.
 */
export function createServerFactory(options: ServerOptions) {
  return (handler: Handler): HttpServer => {
    const h2Handler = handler as unknown as H2Handler;
    if (options.tls) {
      const server = createSecureServer(
        {
          key: options.tls.key,
          cert: options.tls.cert,
          allowHTTP1: true,
          ALPNProtocols: ["h2", "http/1.1"],
          ...h1Options(options),
        },
        h2Handler,
      );
      server.on("session", (s: Http2Session) => closeWhenIdle(s, options.idleTimeoutMs));
      // listen/close/address are all fastify calls, and both server kinds have them.
      return server as unknown as HttpServer;
    }
    const http1 = createHttpServer(h1Options(options), handler);
    if (options.h2c) addH2c(http1, h2Handler, options);
    return http1;
  };
}

function closeWhenIdle(session: Http2Session, idleTimeoutMs: number): void {
  session.setTimeout(idleTimeoutMs, () => session.close());
}

/**
 * Routes each new connection of `http1` by its first bytes. The HTTP/1.1 server keeps
 * its own listen/close lifecycle; HTTP/2 sessions are closed with it.
 */
function addH2c(http1: HttpServer, handler: H2Handler, options: ServerOptions): void {
  const { headersTimeoutMs, idleTimeoutMs } = options;
  const http2 = createH2Server({}, handler);
  const sessions = new Set<Http2Session>();
  http2.on("session", (s: Http2Session) => {
    sessions.add(s);
    s.once("close", () => sessions.delete(s));
    closeWhenIdle(s, idleTimeoutMs);
  });
  const h1Listeners = http1.listeners("connection") as Array<(socket: Socket) => void>;
  http1.removeAllListeners("connection");
  http1.on("connection", (socket: Socket) => {
    sniff(socket, headersTimeoutMs, (isH2) => {
      if (isH2) http2.emit("connection", socket);
      else for (const l of h1Listeners) l.call(http1, socket);
    });
  });
  // The HTTP/1.1 server counts the h2c sockets among its connections and would wait for
  // them forever on close: the sessions are asked to finish (GOAWAY) as closing starts.
  const close = http1.close.bind(http1);
  http1.close = (callback?: (err?: Error) => void) => {
    for (const s of sessions) {
      s.close();
      setTimeout(() => s.destroy(), SHUTDOWN_GRACE_MS).unref();
    }
    return close(callback);
  };
}

/**
 * Reads until the bytes either diverge from the preface or complete it, then puts them
 * back and lets the chosen server read them as if nothing had happened.
 */
function sniff(socket: Socket, timeoutMs: number, route: (isH2: boolean) => void): void {
  let seen = Buffer.alloc(0);
  // A connection that never says anything is cut like a slow HTTP/1.1 header would be.
  const timer = setTimeout(() => socket.destroy(), timeoutMs);
  const decide = (isH2: boolean) => {
    clearTimeout(timer);
    socket.off("data", onData);
    socket.off("error", onEarlyEnd);
    socket.off("end", onEarlyEnd);
    socket.pause();
    socket.unshift(seen);
    route(isH2);
    // The chosen server attaches its reader synchronously; flow resumes on the next tick.
    process.nextTick(() => socket.resume());
  };
  const onData = (chunk: Buffer) => {
    seen = Buffer.concat([seen, chunk]);
    const n = Math.min(seen.length, PREFACE.length);
    if (!seen.subarray(0, n).equals(PREFACE.subarray(0, n))) decide(false);
    else if (seen.length >= PREFACE.length) decide(true);
  };
  const onEarlyEnd = () => {
    clearTimeout(timer);
    socket.destroy();
  };
  socket.on("data", onData);
  socket.once("error", onEarlyEnd);
  socket.once("end", onEarlyEnd);
}

/**
 * Ends every connection of a listener that is closing and has nothing in flight, so open
 * keep-alive connections do not hold it open until they idle out. The TLS listener is an
 * HTTP/2 server without this call: its sessions end with their GOAWAY or idle timeout.
 */
export function closeAllConnections(server: HttpServer): void {
  const s = server as Partial<Pick<HttpServer, "closeAllConnections">>;
  if (typeof s.closeAllConnections === "function") s.closeAllConnections.call(server);
}
