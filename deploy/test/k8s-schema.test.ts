// The schema check itself: it accepts a valid object and names what is wrong with an invalid
// one (a field the API does not know, a wrong type, a missing required field, an unknown kind).
import { describe, expect, it } from "vitest";
import { validateObjects } from "./k8s-schema.ts";
import type { K8sObject } from "./k8s-schema.ts";

function deployment(container: Record<string, unknown> = {}, spec: Record<string, unknown> = {}) {
  return {
    apiVersion: "apps/v1",
    kind: "Deployment",
    metadata: { name: "web", namespace: "zml" },
    spec: {
      replicas: 2,
      selector: { matchLabels: { app: "web" } },
      template: {
        metadata: { labels: { app: "web" } },
        spec: {
          containers: [
            {
              name: "web",
              image: "web:1.0.0",
              ports: [{ name: "http", containerPort: 8080 }],
              readinessProbe: { httpGet: { path: "/readyz", port: "http" } },
              ...container,
            },
          ],
        },
      },
      ...spec,
    },
  } as K8sObject;
}

// The first check compiles the schema's declarations: seconds on a loaded machine.
describe("validateObjects", { timeout: 60_000 }, () => {
  it("accepts a valid object", async () => {
    expect(await validateObjects([deployment()])).toEqual([]);
  });

  it("rejects a field the API does not know, at any depth", async () => {
    expect(await validateObjects([deployment({}, { replica: 2 })])).toEqual([
      {
        object: "Deployment/web",
        message: expect.stringContaining("'\"replica\"' does not exist"),
      },
    ]);
    expect(await validateObjects([deployment({ livenesProbe: {} })])).toEqual([
      { object: "Deployment/web", message: expect.stringContaining("livenesProbe") },
    ]);
  });

  it("rejects a value of the wrong type", async () => {
    const problems = await validateObjects([deployment({ ports: [{ containerPort: "8080" }] })]);
    expect(problems).toContainEqual({
      object: "Deployment/web",
      message: expect.stringContaining(
        "/spec/template/spec/containers/0/ports/0/containerPort must be integer",
      ),
    });
  });

  it("rejects a missing required field", async () => {
    const bad = deployment();
    delete (bad.spec as { selector?: unknown }).selector;
    expect(await validateObjects([bad])).toContainEqual({
      object: "Deployment/web",
      message: expect.stringContaining("/spec must have required property selector"),
    });
  });

  it("rejects a kind or version without a schema", async () => {
    const problems = await validateObjects([
      { apiVersion: "apps/v1", kind: "Deploymnet", metadata: { name: "x" } },
      { apiVersion: "apps/v9", kind: "Deployment", metadata: { name: "y" } },
    ]);
    expect(problems.map((p) => p.object)).toEqual(
      expect.arrayContaining(["Deploymnet/x", "Deployment/y"]),
    );
    expect(problems[0]!.message).toBe("no schema for apiVersion apps/v1, kind Deploymnet");
  });

  it("names the object each problem belongs to", async () => {
    const ok = deployment();
    const bad = { ...deployment({ imagePullPolicy: 1 }), metadata: { name: "other" } } as K8sObject;
    const problems = await validateObjects([ok, bad]);
    expect(problems.length).toBeGreaterThan(0);
    expect(new Set(problems.map((p) => p.object))).toEqual(new Set(["Deployment/other"]));
  });
});
