import { execFileSync } from "node:child_process";
import { mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { SERVICE_IDENTITIES } from "@zml/contracts";
import { describe, expect, it } from "vitest";
import {
  authorizationFor,
  createLocalCa,
  renderClientTls,
  renderClusterTls,
  generateIdentity,
  permissionsFor,
  readIdentity,
  seedFileOf,
  UnknownIdentityError,
  writeCredentials,
} from "../src/index.ts";

const kvWrite = (bucket: string) => `$KV.${bucket}.>`;

describe("permissionsFor", () => {
  it("lets only admin write configuration, revocations and nodes", () => {
    for (const bucket of ["zml_nodes", "zml_accounts", "zml_revocations", "zml_measurements"]) {
      const writers = SERVICE_IDENTITIES.filter((i) =>
        permissionsFor(i).publish.includes(kvWrite(bucket)),
      );
      expect(writers, bucket).toEqual(["admin"]);
    }
  });

  it("lets only the attestation service write attestations, the aggregator node state", () => {
    const writersOf = (bucket: string) =>
      SERVICE_IDENTITIES.filter((i) => permissionsFor(i).publish.includes(kvWrite(bucket)));
    expect(writersOf("zml_attestations")).toEqual(["attestation"]);
    expect(writersOf("zml_node_state")).toEqual(["health-aggregator"]);
  });

  it("lets the aggregator's spot-price feed write only the feed's own cost keys", () => {
    const p = permissionsFor("health-aggregator");
    const costWrites = p.publish.filter((s) => s.startsWith("$KV.zml_costs."));
    expect(costWrites).toEqual(["$KV.zml_costs.spot.>"]);
    expect(p.publish).not.toContain("$JS.API.STREAM.CREATE.KV_zml_costs");
    expect(p.publish).toContain("$JS.API.STREAM.INFO.KV_zml_cloud_accounts");
    expect(p.publish.filter((s) => s.startsWith("$KV.zml_cloud_accounts"))).toEqual([]);
  });

  it("lets only intake publish route requests and only dispatchers receive them", () => {
    const pub = SERVICE_IDENTITIES.filter((i) =>
      permissionsFor(i).publish.includes("zml.route.request"),
    );
    const sub = SERVICE_IDENTITIES.filter((i) =>
      permissionsFor(i).subscribe.includes("zml.route.request"),
    );
    expect({ pub, sub }).toEqual({ pub: ["intake"], sub: ["dispatcher"] });
  });

  it("gives each identity its own inbox, which only the dispatcher may answer into for intake", () => {
    for (const i of SERVICE_IDENTITIES) {
      expect(permissionsFor(i).subscribe.filter((s) => s.startsWith("_INBOX"))).toEqual([
        `_INBOX_${i}.>`,
      ]);
    }
    const intoIntake = SERVICE_IDENTITIES.filter((i) =>
      permissionsFor(i).publish.includes("_INBOX_intake.>"),
    );
    expect(intoIntake).toEqual(["dispatcher"]);
    expect(permissionsFor("attestation").allowResponses).toBe(true);
  });

  it("grants no wildcard over the whole bus or the whole JetStream API", () => {
    for (const i of [...SERVICE_IDENTITIES, "batch-acme"]) {
      const p = permissionsFor(i);
      for (const s of [...p.publish, ...p.subscribe]) {
        expect(s, i).not.toMatch(/^(>|\*\.>|\$JS\.API\.>|\$KV\.>|_INBOX\.>)$/);
      }
    }
  });

  it("lets a batch producer queue jobs for its own account only", () => {
    const p = permissionsFor("batch-acme");
    expect(p.publish).toContain("zml.jobs.submit.acme.*");
    expect(p.publish.filter((s) => s.startsWith("zml."))).toEqual(["zml.jobs.submit.acme.*"]);
    expect(p.subscribe).toEqual(["_INBOX_batch-acme.>"]);
  });

  it("lets a batch producer read back its own account's results, by direct get only", () => {
    const reads = permissionsFor("batch-acme").publish.filter((s) =>
      s.includes(".ZML_JOB_RESULTS"),
    );
    expect(reads).toEqual(["$JS.API.DIRECT.GET.ZML_JOB_RESULTS.zml.jobs.result.acme.*"]);
  });

  it("knows no other identity", () => {
    expect(() => permissionsFor("root")).toThrow(UnknownIdentityError);
    expect(() => permissionsFor("batch-bad.account")).toThrow(UnknownIdentityError);
  });
});

describe("authorization config", () => {
  it("is accepted by nats-server", async () => {
    const dir = await mkdtemp(join(tmpdir(), "zml-auth-test-"));
    try {
      const ids = [...SERVICE_IDENTITIES, "batch-acme"].map(generateIdentity);
      const conf = join(dir, "nats.conf");
      await writeFile(conf, `port: -1\n${authorizationFor(ids)}`);
      const out = execFileSync("nats-server", ["-c", conf, "-t"], { encoding: "utf8" });
      expect(out + "").not.toMatch(/error/i);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe("TLS config", { timeout: 20_000 }, () => {
  it("gives nats-server client TLS and mutual TLS on cluster routes from a local CA", async () => {
    const dir = await mkdtemp(join(tmpdir(), "zml-tls-test-"));
    try {
      const ca = await createLocalCa(join(dir, "tls"), { hosts: ["localhost", "127.0.0.1"] });
      const cert = execFileSync("openssl", ["x509", "-in", ca.certFile, "-noout", "-text"], {
        encoding: "utf8",
      });
      expect(cert).toContain("IP Address:127.0.0.1");
      expect(cert).toContain("TLS Web Client Authentication"); // usable as a route cert
      execFileSync("openssl", ["verify", "-CAfile", ca.caFile, ca.certFile]);
      const cluster = renderClusterTls({
        name: "zml",
        host: "127.0.0.1",
        port: -1,
        routes: ["tls://127.0.0.1:16222"],
        tls: ca,
      });
      expect(cluster).toMatch(/verify: true/);
      const conf = join(dir, "nats.conf");
      const ids = SERVICE_IDENTITIES.map(generateIdentity);
      await writeFile(conf, `port: -1\n${authorizationFor(ids)}${renderClientTls(ca)}${cluster}`);
      execFileSync("nats-server", ["-c", conf, "-t"], { encoding: "utf8" });
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe("writeCredentials", () => {
  it("keeps existing seeds, adds missing ones, rotates on request", async () => {
    const dir = await mkdtemp(join(tmpdir(), "zml-creds-test-"));
    try {
      const first = await writeCredentials(dir, ["intake", "dispatcher"]);
      expect(first.generated).toEqual(["dispatcher", "intake"]);
      expect((await stat(seedFileOf(dir, "intake"))).mode & 0o777).toBe(0o600);
      const intakeKey = first.identities.find((i) => i.identity === "intake")!.publicKey;

      const second = await writeCredentials(dir, ["intake", "admin"]);
      expect(second.generated).toEqual(["admin"]);
      expect(second.identities.map((i) => i.identity)).toEqual(["admin", "dispatcher", "intake"]);
      expect((await readIdentity("intake", seedFileOf(dir, "intake"))).publicKey).toBe(intakeKey);

      const rotated = await writeCredentials(dir, [], ["intake"]);
      expect(rotated.generated).toEqual(["intake"]);
      const newKey = (await readIdentity("intake", seedFileOf(dir, "intake"))).publicKey;
      expect(newKey).not.toBe(intakeKey);
      const auth = await readFile(rotated.authConfigFile, "utf8");
      expect(auth).toContain(newKey);
      expect(auth).not.toContain(intakeKey);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("refuses an unknown identity before writing anything", async () => {
    const dir = join(tmpdir(), `zml-creds-none-${process.pid}`);
    await expect(writeCredentials(dir, ["root"])).rejects.toBeInstanceOf(UnknownIdentityError);
    await expect(stat(dir)).rejects.toThrow(/ENOENT/);
  });
});
