import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { INTEL_SGX_ROOT_CA_PEM, parseQuote } from "../src/index.ts";
import { expectedFor, fixture } from "./fixtures.ts";
import { runCommand } from "./run-command.ts";

const FILES: Record<string, Uint8Array> = {
  "phala.bin": fixture("v4-dcap-qvl-phala.bin"),
  "phala.hex": new TextEncoder().encode(
    Buffer.from(fixture("v4-dcap-qvl-phala.bin")).toString("hex") + "\n",
  ),
  "phala.b64": new TextEncoder().encode(
    Buffer.from(fixture("v4-dcap-qvl-phala.bin")).toString("base64"),
  ),
  "phala.json": fixture("v4-dcap-qvl-phala.collateral.json.txt"),
  "debug.bin": fixture("v4-trustee-debug.bin"),
  "root.pem": new TextEncoder().encode(INTEL_SGX_ROOT_CA_PEM),
  "intermediate.pem": new TextEncoder().encode(
    parseQuote(fixture("v4-dcap-qvl-phala.bin")).pckCertChainPem[1],
  ),
  "broken.json": new TextEncoder().encode("{ nope"),
  "not-a-cert.pem": new TextEncoder().encode("hello"),
};

function run(
  argv: string[],
  now = "2025-07-01T00:00:00Z",
): { code: number; stdout: string; stderr: string } {
  return runCommand(FILES, argv, now);
}

describe("zml verify-quote", () => {
  const mrtd = expectedFor("v4-dcap-qvl-phala.bin").parsed.mrTd;

  it("prints fields, checks and the verdict, and exits 0 for a verified quote", () => {
    const { code, stdout, stderr } = run([
      "phala.bin",
      "--collateral",
      "phala.json",
      "--at",
      "2025-07-01T00:00:00Z",
    ]);
    expect(code).toBe(0);
    expect(stderr).toBe("");
    expect(stdout).toContain(`mrtd             ${mrtd}`);
    expect(stdout).toMatch(/✓ quote_signature/);
    expect(stdout).toMatch(/✓ tcb_status\s+UpToDate/);
    expect(stdout).toContain("TCB status: UpToDate");
    expect(stdout).toContain("Verdict: VERIFIED");
    expect(stdout).not.toContain("✗");
  });

  it("reads hex and base64 quote files, and accepts a leading verify-quote token", () => {
    expect(run(["phala.hex"]).code).toBe(0);
    expect(run(["verify-quote", "phala.b64", "--root", "root.pem"]).code).toBe(0);
  });

  it("uses the injected clock when --at is absent", () => {
    const expired = run(["phala.bin", "--collateral", "phala.json"], "2026-01-01T00:00:00Z");
    expect(expired.code).toBe(1);
    expect(expired.stdout).toMatch(/✗ pck_crl\s+expired/);
  });

  it("exits 1 and marks the failed check for a quote that does not verify", () => {
    const { code, stdout } = run(["debug.bin", "--at", "2024-07-01T00:00:00Z"]);
    expect(code).toBe(1);
    expect(stdout).toMatch(/✗ td_debug\s+DEBUG set/);
    expect(stdout).toContain("Verdict: NOT VERIFIED (td_debug: DEBUG set");
  });

  it("exits 1 with a root the chain does not end in", () => {
    const { code, stdout } = run(["phala.bin", "--root", "intermediate.pem"]);
    expect(code).toBe(1);
    expect(stdout).toMatch(/✗ pck_chain\s+root certificate is not the pinned root/);
  });

  it("prints a JSON document with --json", () => {
    const { code, stdout } = run(["phala.bin", "--json", "--collateral", "phala.json"]);
    expect(code).toBe(0);
    const doc = JSON.parse(stdout) as {
      ok: boolean;
      tcbStatus: string;
      expiresAt: string;
      fields: { mrtd: string };
      checks: { name: string; ok: boolean }[];
    };
    expect(doc.ok).toBe(true);
    expect(doc.tcbStatus).toBe("UpToDate");
    expect(doc.expiresAt).toBe("2025-07-19T10:00:35.000Z");
    expect(doc.fields.mrtd).toBe(mrtd);
    expect(doc.checks.every((c) => c.ok)).toBe(true);
    const failed = JSON.parse(run(["debug.bin", "--json"]).stdout) as {
      ok: boolean;
      reason: string;
    };
    expect(failed.ok).toBe(false);
    expect(failed.reason).toMatch(/^td_debug/);
  });

  const usageErrors: [string, string[], RegExp][] = [
    ["no file", [], /exactly one quote file/],
    ["two files", ["phala.bin", "debug.bin"], /exactly one quote file/],
    ["an unknown flag", ["phala.bin", "--fast"], /Unknown option/],
    ["a missing flag value", ["phala.bin", "--at"], /argument missing/],
    ["a bad time", ["phala.bin", "--at", "yesterday"], /not an ISO time/],
    ["an unreadable quote", ["missing.bin"], /cannot read quote missing.bin/],
    [
      "an unreadable collateral",
      ["phala.bin", "--collateral", "missing.json"],
      /cannot read collateral/,
    ],
    ["collateral that is not JSON", ["phala.bin", "--collateral", "broken.json"], /not JSON/],
    ["a root that is not PEM", ["phala.bin", "--root", "not-a-cert.pem"], /not a PEM certificate/],
  ];
  for (const [name, argv, message] of usageErrors) {
    it(`exits 2 on ${name}`, () => {
      const { code, stdout, stderr } = run(argv);
      expect(code).toBe(2);
      expect(stdout).toBe("");
      expect(stderr).toMatch(message);
      expect(stderr).toContain("usage: zml verify-quote");
    });
  }

  it("prints usage and exits 0 on --help", () => {
    const { code, stdout } = run(["--help"]);
    expect(code).toBe(0);
    expect(stdout).toContain("exit status: 0 verified, 1 not verified, 2 usage error");
  });

  it("exits 1 for a file that is not a quote", () => {
    const { code, stdout } = run(["root.pem"]);
    expect(code).toBe(1);
    expect(stdout).toMatch(/✗ quote_format/);
  });
});

describe("src/cli.ts as a process", () => {
  const cli = fileURLToPath(new URL("../src/cli.ts", import.meta.url));
  const quote = fileURLToPath(new URL("./fixtures/v4-trustee-debug.bin", import.meta.url));

  it("passes the exit code through", () => {
    const ok = spawnSync(
      process.execPath,
      [cli, "verify-quote", quote, "--at", "2024-07-01T00:00:00Z"],
      {
        encoding: "utf8",
      },
    );
    expect(ok.status).toBe(1);
    expect(ok.stdout).toContain("✗ td_debug");
    const usage = spawnSync(process.execPath, [cli, "verify-quote"], { encoding: "utf8" });
    expect(usage.status).toBe(2);
    const noCommand = spawnSync(process.execPath, [cli], { encoding: "utf8" });
    expect(noCommand.status).toBe(2);
  });
});
