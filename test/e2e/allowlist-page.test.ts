// The public allowlist page in a real browser (Debian's Chromium, driven by playwright-core):
// it lists the fleet's TEE nodes, and a revocation made through the admin API shows on the
// open page without a reload.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { chromium } from "playwright-core";
import type { BrowserContext, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { adminHeaders, startActiveStack } from "../support/stack.ts";
import type { Stack } from "../support/stack.ts";
import { MRTD, approveMeasurements, teeNode, waitForResult, pki } from "./attestation-fixtures.ts";

const CHROMIUM = "/usr/bin/chromium";
let stack: Stack;
let profile: string;
let browser: BrowserContext;
let page: Page;

beforeAll(async () => {
  stack = await startActiveStack({
    nodes: [teeNode("t3-a"), teeNode("t4-b", {}, 4), { nodeId: "t1-plain", family: "H100" }],
    allowedTiers: [1, 3, 4],
    trustedRootPem: pki.root.pem,
    seed: (bus) =>
      approveMeasurements(bus, [
        { id: "t3", mrtd: MRTD },
        { id: "t4", mrtd: MRTD, tier: 4 },
      ]),
  });
  for (const id of ["t3-a", "t4-b"]) await waitForResult(stack, id, (r) => r.ok, "attested");
  profile = await mkdtemp(join(tmpdir(), "zml-chromium-"));
  browser = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-quic",
      "--no-first-run",
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
  page = browser.pages()[0] ?? (await browser.newPage());
}, 90_000);

afterAll(async () => {
  await browser?.close();
  if (profile) await rm(profile, { recursive: true, force: true });
  await stack?.stop();
});

const row = (nodeId: string) => page.locator(`tr[data-node-id="${nodeId}"]`);

describe("the allowlist page", () => {
  it("lists the fleet's TEE nodes as attested, and nothing of tier 1", async () => {
    await page.goto(`${stack.intakeUrl}/allowlist`);
    await row("t3-a").and(page.locator('[data-status="attested"]')).waitFor({ timeout: 10_000 });
    await row("t4-b").and(page.locator('[data-status="attested"]')).waitFor({ timeout: 10_000 });
    expect(await page.locator("tbody tr").count()).toBe(2);
    expect(await row("t1-plain").count()).toBe(0);
    const text = await row("t3-a").innerText();
    expect(text).toContain(MRTD);
    expect(text).toContain("UpToDate");
  });

  it("shows a revocation made through the admin API within 2 s, without a reload", async () => {
    await page.evaluate(() => {
      (globalThis as unknown as { zmlMarker: number }).zmlMarker = 42;
    });
    const revocation = { id: "rev-page", reason: "e2e: vendor advisory", node_id: "t3-a" };
    const startedAt = performance.now();
    const res = await fetch(`${stack.intakeUrl}/admin/v1/revocations/rev-page`, {
      method: "PUT",
      headers: adminHeaders(),
      body: JSON.stringify(revocation),
    });
    expect(res.status, await res.text()).toBe(201);
    await row("t3-a").and(page.locator('[data-status="revoked"]')).waitFor({ timeout: 2_000 });
    const shownMs = performance.now() - startedAt;
    expect(await row("t3-a").innerText()).toContain("e2e: vendor advisory");
    expect(await row("t4-b").getAttribute("data-status")).toBe("attested");
    // The same document: no navigation happened.
    expect(
      await page.evaluate(() => (globalThis as unknown as { zmlMarker?: number }).zmlMarker),
    ).toBe(42);
    process.stdout.write(
      `allowlist page: revocation shown ${shownMs.toFixed(0)} ms after the admin write\n`,
    );
  });
});
