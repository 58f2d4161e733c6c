import { startNatsServer } from "@zml/harness";
import { describe, expect, it } from "vitest";
import { busOptionsOf, connectBus, natsConnectionOf, OpenBusError } from "../src/index.ts";

const OWN = { env: { PATH: process.env.PATH } };

function recordingLog() {
  const errors: string[] = [];
  return {
    errors,
    log: { info() {}, warn() {}, error: (_o: object, m?: string) => errors.push(m ?? "") },
  };
}

describe("connectBus on a secured bus", { timeout: 30_000 }, () => {
  it("connects as an identity over TLS, with the identity's inbox prefix", async () => {
    await using nats = await startNatsServer(OWN);
    const { log, errors } = recordingLog();
    const bus = await connectBus({ ...nats.client("intake"), name: "t", log });
    try {
      expect(bus.inboxPrefix).toBe("_INBOX_intake");
      expect(natsConnectionOf(bus).info?.tls_required).toBe(true);
      // The identity's job: publishing route requests is allowed (flush surfaces any -ERR).
      natsConnectionOf(bus).publish("zml.route.request", "x");
      await natsConnectionOf(bus).flush();
      expect(errors).toEqual([]);
    } finally {
      await bus.drain();
    }
  });

  it("is refused without an identity, and with a key the server does not know", async () => {
    await using nats = await startNatsServer(OWN);
    await using other = await startNatsServer(OWN);
    const { log } = recordingLog();
    const { caFile } = nats.client("intake");
    const anonymous = connectBus({ servers: nats.url, caFile: caFile!, name: "anon", log });
    await expect(anonymous).rejects.toThrow(/authorization/i);
    const stranger = connectBus({
      servers: nats.url,
      caFile: caFile!,
      nkeySeedFile: other.client("intake").nkeySeedFile!,
      name: "stranger",
      log,
    });
    await expect(stranger).rejects.toThrow(/authorization/i);
  });
});

describe("connectBus on an open bus", { timeout: 30_000 }, () => {
  it("refuses to run there", async () => {
    await using nats = await startNatsServer({ ...OWN, security: "open" });
    const { log } = recordingLog();
    await expect(connectBus({ servers: nats.url, name: "t", log })).rejects.toBeInstanceOf(
      OpenBusError,
    );
  });

  it("runs there only with the insecure flag, and says so loudly", async () => {
    await using nats = await startNatsServer({ ...OWN, security: "open" });
    const { log, errors } = recordingLog();
    const options = busOptionsOf({ NATS_URL: nats.url, NATS_INSECURE: true }, "intake");
    const bus = await connectBus({ ...options, name: "t", log });
    await bus.drain();
    expect(errors.some((m) => m.startsWith("INSECURE: the NATS server accepts anonymous"))).toBe(
      true,
    );
  });
});
