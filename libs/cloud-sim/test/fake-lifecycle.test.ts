import { describe, expect, it } from "vitest";
import {
  CLOUD_FAULT_KINDS,
  startAzurePricesFake,
  startEc2Fake,
  startGcpBillingFake,
} from "../src/index.ts";
import type { CloudFake } from "../src/index.ts";
import { ec2Post } from "./helpers.ts";

/** Each fake with one ordinary, successful request of its provider's kind. */
const FAKES: [string, () => Promise<CloudFake>, (url: string) => Promise<Response>][] = [
  ["EC2", () => startEc2Fake(), (url) => ec2Post(url)],
  ["Azure", () => startAzurePricesFake(), (url) => fetch(`${url}/api/retail/prices`)],
  [
    "GCP",
    () => startGcpBillingFake(),
    (url) => fetch(`${url}/v1/services/6F81-5844-456A/skus?key=k`),
  ],
];

describe("every cloud fake", () => {
  it("names the four fault kinds", () => {
    expect(CLOUD_FAULT_KINDS).toEqual(["throttle", "auth", "malformed", "down"]);
  });

  for (const [name, start, request] of FAKES) {
    describe(name, () => {
      it("listens on a free 127.0.0.1 port", async () => {
        await using a = await start();
        await using b = await start();
        expect(a.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
        expect(a.url).not.toBe(b.url);
        expect((await request(a.url)).status).toBe(200);
      });

      it("faults exactly the next `times` requests of each kind, or until heal(); stats count both", async () => {
        await using fake = await start();
        let requests = 0;
        let faulted = 0;
        for (const kind of CLOUD_FAULT_KINDS) {
          fake.fail(kind, 2);
          const statuses: number[] = [];
          for (let i = 0; i < 3; i++) {
            const res = await request(fake.url);
            statuses.push(res.status);
            await res.arrayBuffer();
          }
          requests += 3;
          faulted += 2;
          // A malformed answer is a 200 too: the fault shows in the counts and the body.
          if (kind !== "malformed") expect(statuses[0], kind).not.toBe(200);
          expect(statuses[1], kind).toBe(statuses[0]);
          expect(statuses[2], kind).toBe(200);
          expect(fake.stats(), kind).toEqual({ requests, faulted });
        }
        fake.fail("down", Infinity);
        for (let i = 0; i < 4; i++) expect((await request(fake.url)).status).toBe(503);
        fake.heal();
        expect((await request(fake.url)).status).toBe(200);
        expect(fake.stats()).toEqual({ requests: requests + 5, faulted: faulted + 4 });
      });

      it("a new fail() replaces the fault before it", async () => {
        await using fake = await start();
        fake.fail("down", 5);
        fake.fail("auth", 1);
        expect((await request(fake.url)).status).toBe(401);
        expect((await request(fake.url)).status).toBe(200);
      });

      it("refuses connections once closed (close() and await using)", async () => {
        const fake = await start();
        await fake.close();
        await expect(request(fake.url)).rejects.toThrow(TypeError);
        let url: string;
        {
          await using scoped = await start();
          url = scoped.url;
        }
        await expect(request(url)).rejects.toThrow(TypeError);
      });
    });
  }
});
