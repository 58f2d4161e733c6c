// Fails before anything starts when a port the launcher needs is taken, naming the setting
// that moves it, instead of a service dying with EADDRINUSE halfway through start-up.
import { createServer } from "node:net";
import { ConfigError } from "@zml/runtime";

export interface WantedPort {
  setting: string;
  port: number;
  /** What listens there, when it is not the setting's own service. */
  what?: string;
}

function isFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once("error", () => resolve(false));
    server.listen(port, "127.0.0.1", () => server.close(() => resolve(true)));
  });
}

/**
 * A free port for a service that binds it later. It is taken below Linux's ephemeral range
 * (32768 and up), where `listen(0)` draws from: a simulator or nats-server started in the
 * meantime on port 0 can then never be handed the same port. Never one of `taken`.
 */
export async function pickFreePort(taken: Set<number>): Promise<number> {
  for (;;) {
    const port = 20_000 + Math.floor(Math.random() * 12_000);
    if (taken.has(port) || !(await isFree(port))) continue;
    taken.add(port);
    return port;
  }
}

export async function assertPortsFree(wanted: WantedPort[]): Promise<void> {
  const taken: WantedPort[] = [];
  for (const w of wanted) if (!(await isFree(w.port))) taken.push(w);
  if (taken.length === 0) return;
  throw new ConfigError(
    taken.map((w) => ({
      setting: w.setting,
      problem: `port ${w.port}${w.what ? ` (${w.what})` : ""} is already in use`,
      fix: `stop what listens on ${w.port} (another up.sh?), or set ${w.setting} to another port (0 = any free port)`,
    })),
  );
}
