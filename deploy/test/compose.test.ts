// The compose stack and its images cannot run here (no Docker engine), so this checks
// everything about them that can be checked without one: the compose file against a strict
// schema of the keys it uses, every service's image target and environment against the
// service's own config schema, the wiring (dependencies, ports, scrape targets, endpoints),
// the Dockerfile's commands against the repository and the production install, and the
// simulators and `zml apply` run with exactly the arguments the containers get.
import { execFile, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { promisify } from "node:util";
import { parseFleetDocument } from "@zml/fleet";
import {
  findNatsServerBinary,
  repoRoot,
  SERVICE_MALLOC_ENV,
  SERVICE_NODE_FLAGS,
  startNatsServer,
  startProcess,
} from "@zml/harness";
import { CONFIG_ERROR_EXIT_CODE } from "@zml/runtime";
import { describe, expect, it } from "vitest";
import { parse as parseYaml } from "yaml";
import { z } from "zod";
import { effectiveCommand, parseDockerfile } from "./dockerfile.ts";
import { runtimeImports } from "./runtime-imports.ts";
import {
  configKeys,
  LISTEN_KEYS,
  loadServiceConfig,
  METRICS_KEYS,
  natsSize,
  SERVICE_TARGETS,
  STANDARD_ENV,
} from "./service-config.ts";

const root = repoRoot();
const composeDir = join(root, "deploy/compose");
const composeFile = join(composeDir, "docker-compose.yml");
const dockerfilePath = "deploy/docker/Dockerfile";
const DEMO_API_KEY = "zml-demo-key";

/** Build targets of the shared Dockerfile, and the source each ZML service's config lives in. */
const TARGETS = ["intake", "dispatcher", "health-aggregator", "attestation", "node-sim", "cli"];

// The Compose keys this stack uses, strictly: a typo (`depend_on`) or a value of the wrong
// shape (an unquoted `true` in `environment`) fails here instead of on a user's machine.
const DependsOn = z.union([
  z.array(z.string()),
  z.record(
    z.string(),
    z.strictObject({
      condition: z.enum(["service_started", "service_healthy", "service_completed_successfully"]),
    }),
  ),
]);
const ServiceSchema = z
  .strictObject({
    image: z
      .string()
      .regex(/^[\w./-]+:[\w.-]+$/, "a pinned image tag")
      .optional(),
    build: z
      .strictObject({ context: z.string(), dockerfile: z.string(), target: z.string() })
      .optional(),
    command: z.array(z.string()).optional(),
    environment: z.record(z.string(), z.string()).optional(),
    ports: z.array(z.string().regex(/^\d+:\d+$/)).optional(),
    expose: z.array(z.string().regex(/^\d+$/)).optional(),
    volumes: z.array(z.string()).optional(),
    depends_on: DependsOn.optional(),
    healthcheck: z
      .strictObject({
        test: z.array(z.string()).min(2),
        interval: z.string(),
        timeout: z.string(),
        retries: z.number().int().positive(),
      })
      .optional(),
    restart: z.enum(["no", "always", "on-failure", "unless-stopped"]).optional(),
    init: z.boolean().optional(),
  })
  .refine((s) => (s.image === undefined) !== (s.build === undefined), {
    message: "exactly one of image and build",
  });
type ComposeService = z.infer<typeof ServiceSchema>;
const ComposeSchema = z.strictObject({
  name: z.string(),
  services: z.record(z.string(), ServiceSchema),
  volumes: z.record(z.string(), z.null()).optional(),
});

function loadCompose() {
  const raw = parseYaml(readFileSync(composeFile, "utf8"), { merge: true }) as Record<
    string,
    unknown
  >;
  // `x-` keys are Compose extension fields: anchors for the services, ignored by Compose.
  const doc = Object.fromEntries(Object.entries(raw).filter(([k]) => !k.startsWith("x-")));
  return ComposeSchema.parse(doc);
}

const compose = loadCompose();
const services = Object.entries(compose.services);
const stages = parseDockerfile(readFileSync(join(root, dockerfilePath), "utf8"));

function stageOf(service: ComposeService) {
  const stage = stages.get(service.build?.target ?? "");
  if (!stage) throw new Error(`no Dockerfile stage ${service.build?.target}`);
  return stage;
}

function byTarget(target: string): Array<[string, ComposeService]> {
  return services.filter(([, s]) => s.build?.target === target);
}

function dependencies(s: ComposeService): Record<string, string> {
  const d = s.depends_on ?? {};
  if (Array.isArray(d)) return Object.fromEntries(d.map((n) => [n, "service_started"]));
  return Object.fromEntries(Object.entries(d).map(([n, v]) => [n, v.condition]));
}

/** The environment a container of this service starts with: image ENV, then compose's. */
function containerEnv(s: ComposeService): Record<string, string> {
  return { ...stageOf(s).env, ...s.environment };
}

/** `host:port` of an `http://` URL in a fleet endpoint or scrape target. */
function hostPort(url: string): { host: string; port: number } {
  const u = new URL(url);
  return { host: u.hostname, port: Number(u.port || 80) };
}

/** The value of `--name=value` (or `--name value`) in an argument list. */
function flag(args: string[], name: string): string[] {
  const out: string[] = [];
  args.forEach((a, i) => {
    if (a.startsWith(`--${name}=`)) out.push(a.slice(name.length + 3));
    else if ((a === `--${name}` || a === `-${name}`) && args[i + 1] !== undefined) {
      out.push(args[i + 1]!);
    }
  });
  return out;
}

describe("docker-compose.yml", () => {
  it("builds every ZML container from the shared Dockerfile at a known target", () => {
    for (const [name, s] of services) {
      if (s.image !== undefined) continue;
      expect(resolve(composeDir, s.build!.context), name).toBe(root);
      expect(s.build!.dockerfile, name).toBe(dockerfilePath);
      expect(TARGETS, name).toContain(s.build!.target);
      expect(stages.has(s.build!.target), name).toBe(true);
    }
    for (const target of SERVICE_TARGETS) expect(byTarget(target), target).toHaveLength(1);
    expect(byTarget("node-sim").length).toBeGreaterThanOrEqual(3);
  });

  it("pins every image to a full version, Node's to the one the workspace runs on", () => {
    for (const [name, s] of services) {
      if (s.image !== undefined) expect(s.image, name).toMatch(/:v?\d+\.\d+\.\d+(-[a-z]+)?$/);
    }
    const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as {
      devDependencies: Record<string, string>;
    };
    const dockerfile = readFileSync(join(root, dockerfilePath), "utf8");
    expect(dockerfile).toContain(`ARG NODE_IMAGE=node:${pkg.devDependencies.node}-slim\n`);
  });

  it("runs a pinned nats-server at or above the minimum stated in docs/security.md", () => {
    const image = compose.services.nats!.image!;
    const [, major, minor, patch] = /^nats:(\d+)\.(\d+)\.(\d+)-alpine$/.exec(image) ?? [];
    expect(major, `${image} is pinned to a release`).toBeDefined();
    const version = [Number(major), Number(minor), Number(patch)];
    const atLeast = (min: number[]) =>
      version[0]! > min[0]! ||
      (version[0] === min[0] &&
        (version[1]! > min[1]! || (version[1] === min[1] && version[2]! >= min[2]!)));
    // CVE-2025-30215 is fixed in 2.10.27 and 2.11.1.
    expect(version[1] === 10 ? atLeast([2, 10, 27]) : atLeast([2, 11, 1]), image).toBe(true);
    const doc = readFileSync(join(root, "docs/security.md"), "utf8");
    expect(doc).toContain("2.10.27");
    expect(doc).toContain("2.11.1");
  });

  it("keeps the bus private and authenticated: no host port, nkeys, TLS, one identity each", () => {
    const nats = compose.services.nats!;
    expect(nats.ports ?? []).toEqual([]);
    expect(nats.expose).toEqual(["4222"]);
    const conf = readFileSync(join(composeDir, "nats.conf"), "utf8");
    expect(conf).toMatch(/^include "creds\/auth\.conf"$/m);
    expect(conf).toMatch(/^tls \{/m);
    expect(conf).not.toMatch(/no_auth_user/);
    expect(dependencies(nats)["bus-credentials"]).toBe("service_completed_successfully");
    const job = compose.services["bus-credentials"]!;
    expect(effectiveCommand(stageOf(job), job.command).slice(2, 4)).toEqual([
      "bus-credentials",
      "--out",
    ]);
    for (const target of SERVICE_TARGETS) {
      const [[, s]] = byTarget(target) as [[string, ComposeService]];
      const env = containerEnv(s);
      expect(env.NATS_NKEY_SEED_FILE, target).toBe(`/creds/${target}.nk`);
      expect(env.NATS_CA_FILE, target).toBe("/creds/tls/ca.pem");
      expect(env.NATS_INSECURE, target).toBeUndefined();
    }
    expect(compose.services["fleet-apply"]!.environment?.NATS_NKEY_SEED_FILE).toBe(
      "/creds/admin.nk",
    );
  });

  it("lets NATS carry the largest request body intake accepts, with its headers", async () => {
    const nats = compose.services.nats!;
    const mount = nats.volumes!.find((v) => v.endsWith(":/etc/nats/nats.conf:ro"))!;
    const confPath = resolve(composeDir, mount.split(":")[0]!);
    expect(flag(nats.command!, "c")).toEqual(["/etc/nats/nats.conf"]);
    const conf = readFileSync(confPath, "utf8");
    // nats-server itself accepts the file, less what the bus-credentials job generates.
    const scratch = mkdtempSync(join(tmpdir(), "zml-nats-conf-"));
    const withoutGenerated = conf.replace(/^include .*$/m, "").replace(/^tls \{[\s\S]*?^\}/m, "");
    writeFileSync(join(scratch, "nats.conf"), withoutGenerated);
    const checked = spawnSync(findNatsServerBinary()!, ["-c", join(scratch, "nats.conf"), "-t"], {
      encoding: "utf8",
    });
    rmSync(scratch, { recursive: true, force: true });
    expect(checked.status, checked.stderr).toBe(0);
    const maxPayload = natsSize(/^max_payload:\s*(\S+)$/m.exec(conf)?.[1] ?? "1MB");
    const [[, intake]] = byTarget("intake") as [[string, ComposeService]];
    const config = await loadServiceConfig("intake", containerEnv(intake));
    const bodyLimit = config.ZML_BODY_LIMIT_BYTES as number;
    expect(bodyLimit).toBeGreaterThan(0);
    // Routing headers and trace context ride along; 64 KiB is far more than they take.
    expect(maxPayload).toBeGreaterThanOrEqual(bodyLimit + 64 * 1024);
    // NATS refuses anything above 64 MB.
    expect(maxPayload).toBeLessThanOrEqual(64 * 1024 * 1024);
  });

  it("runs NATS with JetStream on a volume and sends every service's traces to Jaeger", () => {
    const nats = compose.services.nats!;
    expect(nats.command).toEqual(expect.arrayContaining(["--jetstream", "--store_dir", "/data"]));
    expect(nats.volumes).toContain("nats-data:/data");
    expect(Object.keys(compose.volumes ?? {})).toContain("nats-data");
    const jaeger = compose.services.jaeger!;
    expect(jaeger.image).toMatch(/jaegertracing\/jaeger:2\./);
    expect(jaeger.ports).toContain("16686:16686");
    expect(jaeger.expose).toContain("4318");
    for (const target of SERVICE_TARGETS) {
      const [[, s]] = byTarget(target) as [[string, ComposeService]];
      const env = containerEnv(s);
      expect(env.NATS_URL, target).toBe("nats://nats:4222");
      expect(env.OTEL_EXPORTER_OTLP_ENDPOINT, target).toBe("http://jaeger:4318");
    }
  });

  it("gives each service only variables its config schema knows, and the config accepts them", async () => {
    for (const target of SERVICE_TARGETS) {
      const [[, s]] = byTarget(target) as [[string, ComposeService]];
      const env = containerEnv(s);
      const known = configKeys(target);
      for (const key of Object.keys(env)) {
        if (!STANDARD_ENV.test(key)) expect(known, `${target}: ${key}`).toContain(key);
      }
      const config = await loadServiceConfig(target, env);
      // Bound to every interface, or probes and Prometheus could not reach the port.
      expect(config[LISTEN_KEYS[target].host], target).toBe("0.0.0.0");
    }
  });

  it("starts services only after what they need, and only waits on checks that exist", () => {
    for (const [name, s] of services) {
      for (const [dep, condition] of Object.entries(dependencies(s))) {
        const target = compose.services[dep];
        expect(target, `${name} depends on ${dep}`).toBeDefined();
        if (condition === "service_healthy") {
          const checked =
            target!.healthcheck !== undefined ||
            (target!.build !== undefined && stageOf(target!).healthcheck !== undefined);
          expect(checked, `${name} waits for ${dep} to be healthy`).toBe(true);
        }
        if (condition === "service_completed_successfully") {
          expect(target!.restart, `${dep} is a one-shot job`).toBe("on-failure");
        }
      }
    }
    for (const target of SERVICE_TARGETS) {
      const [[, s]] = byTarget(target) as [[string, ComposeService]];
      expect(dependencies(s).nats, target).toBe("service_healthy");
    }
    expect(dependencies(byTarget("intake")[0]![1])["fleet-apply"]).toBe(
      "service_completed_successfully",
    );
  });

  it("publishes each host port once, and the intake at the port its config listens on", async () => {
    const published = services.flatMap(([, s]) => (s.ports ?? []).map((p) => p.split(":")[0]));
    expect(new Set(published).size).toBe(published.length);
    const [[, intake]] = byTarget("intake") as [[string, ComposeService]];
    const config = await loadServiceConfig("intake", containerEnv(intake));
    expect(intake.ports).toContain(`8080:${String(config.ZML_PORT)}`);
  });

  it("publishes intake's client API only: /metrics, /openapi.json and the admin API listen apart, inside the network", async () => {
    const [[, intake]] = byTarget("intake") as [[string, ComposeService]];
    const config = await loadServiceConfig("intake", containerEnv(intake));
    const admin = config.ZML_ADMIN_PORT as number | undefined;
    expect(admin, "ZML_ADMIN_PORT").toBeGreaterThan(0);
    expect(admin).not.toBe(config.ZML_PORT);
    // Reachable by Prometheus's container, not published on the host.
    expect(config.ZML_ADMIN_HOST).toBe("0.0.0.0");
    expect(intake.expose).toEqual([String(admin)]);
    expect(intake.ports).toEqual([`8080:${String(config.ZML_PORT)}`]);
    for (const [name, s] of services) {
      for (const p of s.ports ?? []) expect(`${name} ${p}`).not.toMatch(new RegExp(`:${admin}$`));
    }
  });

  it("mounts only files that exist in the repository", () => {
    for (const [name, s] of services) {
      for (const volume of s.volumes ?? []) {
        const source = volume.split(":")[0]!;
        if (!source.startsWith(".")) continue;
        expect(existsSync(resolve(composeDir, source)), `${name}: ${source}`).toBe(true);
      }
    }
  });

  it("scrapes every service replica and node at the port it serves metrics on (intake's admin listener)", async () => {
    const prom = parseYaml(readFileSync(join(composeDir, "prometheus.yml"), "utf8")) as {
      scrape_configs: Array<{ dns_sd_configs: Array<{ names: string[]; port: number }> }>;
    };
    const targets = new Map<string, number>();
    for (const job of prom.scrape_configs) {
      for (const sd of job.dns_sd_configs) for (const n of sd.names) targets.set(n, sd.port);
    }
    for (const target of SERVICE_TARGETS) {
      const [[name, s]] = byTarget(target) as [[string, ComposeService]];
      const config = await loadServiceConfig(target, containerEnv(s));
      expect(targets.get(name), name).toBe(config[METRICS_KEYS[target].port]);
      expect(config[METRICS_KEYS[target].host], name).toBe("0.0.0.0");
    }
    for (const [name] of byTarget("node-sim")) expect(targets.get(name), name).toBe(8000);
    for (const name of targets.keys()) expect(compose.services[name], name).toBeDefined();
  });
});

describe("fleet.yaml", () => {
  const fleetPath = join(composeDir, "fleet.yaml");
  const fleet = parseFleetDocument(readFileSync(fleetPath, "utf8"));

  it("points every node at a simulator of the stack that serves what the node declares", () => {
    expect(fleet.nodes.length).toBeGreaterThanOrEqual(3);
    for (const node of fleet.nodes) {
      const { host, port } = hostPort(node.endpoint);
      const sim = compose.services[host];
      expect(sim?.build?.target, `${node.id}: ${host} is a node-sim service`).toBe("node-sim");
      const args = effectiveCommand(stageOf(sim!), sim!.command);
      expect(flag(args, "port").at(-1), node.id).toBe(String(port));
      expect(flag(args, "id"), node.id).toEqual([node.id]);
      expect(flag(args, "flavour"), node.id).toEqual([node.framework]);
      expect(flag(args, "model").sort(), node.id).toEqual([...node.models].sort());
      expect(flag(args, "max-concurrency"), node.id).toEqual([String(node.max_concurrency)]);
    }
  });

  it("has a demo account whose key hash is the documented demo key's", () => {
    const demo = fleet.accounts.find((a) => a.id === "demo");
    const hash = createHash("sha256").update(DEMO_API_KEY).digest("hex");
    expect(demo?.api_key_sha256).toEqual([hash]);
    expect(demo?.allowed_tiers).toContain(1);
  });

  it("is applied by the fleet-apply job's exact `zml apply` command", async () => {
    const job = compose.services["fleet-apply"]!;
    const args = effectiveCommand(stageOf(job), job.command);
    const mount = job.volumes!.map((v) => v.split(":")).find(([src]) => src === "./fleet.yaml");
    expect(mount, "fleet.yaml is mounted").toBeDefined();
    const fileIndex = args.indexOf("-f");
    expect(args[fileIndex + 1]).toBe(mount![1]);
    expect(flag(args, "nats")).toEqual(["nats://nats:4222"]);

    // Our own server even when NATS_URL names a shared one: this writes a whole fleet.
    await using nats = await startNatsServer({ env: { PATH: process.env.PATH } });
    const run = promisify(execFile);
    const local = args
      .slice(1)
      .map((a) => (a === mount![1] ? fleetPath : a === "nats://nats:4222" ? nats.url : a));
    expect(args[0]).toBe("node");
    const env = { ...process.env, ...nats.serviceEnv("admin") };
    const first = await run(process.execPath, local, { cwd: root, env });
    expect(first.stdout).toContain("+ nodes/h100-a created");
    const again = await run(process.execPath, local, { cwd: root, env });
    expect(again.stdout).toContain("no changes");
  }, 60_000);
});

describe("Dockerfile", () => {
  it("copies only what exists and installs production dependencies with the lock file", () => {
    for (const stage of stages.values()) {
      for (const source of stage.copySources) {
        expect(existsSync(join(root, source)), `${stage.name}: COPY ${source}`).toBe(true);
      }
    }
    const runs = [...stages.values()].flatMap((s) => s.runs);
    expect(runs).toEqual([
      expect.stringMatching(/^npm ci --omit=dev\b/),
      // The compile cache: made, filled by every service as `node`, then made read-only.
      "mkdir .compile-cache && chown node .compile-cache",
      expect.stringMatching(/^for s in .*; do .* node "services\/\$s\/src\/main\.ts"/),
      "chown -R root:root .compile-cache",
      // The cli target's openssl, for `zml bus-credentials --tls`.
      expect.stringMatching(
        /^apt-get update && apt-get install -y --no-install-recommends openssl\b/,
      ),
    ]);
    expect(existsSync(join(root, "package-lock.json"))).toBe(true);
  });

  it("runs the services with the dev launcher's and the bench's memory settings, from a compile cache filled for each", () => {
    const runtime = stages.get("runtime")!;
    const warm = runtime.runs.find((r) => r.startsWith("for s in "));
    const [, warmed = ""] = /^for s in ([^;]*);/.exec(warm ?? "") ?? [];
    expect(warmed.split(/\s+/).sort()).toEqual([...SERVICE_TARGETS].sort());
    // The services' own config rejects this level: a start that only compiles, then exit 78.
    expect(warm).toContain(`LOG_LEVEL=invalid-on-purpose-to-only-compile`);
    expect(warm).toContain(`test $? -eq ${CONFIG_ERROR_EXIT_CODE} || exit 1`);
    for (const target of SERVICE_TARGETS) {
      const env = stages.get(target)!.env;
      expect(env.NODE_OPTIONS, target).toBe(SERVICE_NODE_FLAGS.join(" "));
      expect(env.NODE_COMPILE_CACHE, target).toBe("/app/.compile-cache");
      for (const [key, value] of Object.entries(SERVICE_MALLOC_ENV)) {
        expect(env[key], `${target}: ${key}`).toBe(value);
      }
    }
  });

  it("runs every target as a non-root user in production mode, stopped by SIGTERM", () => {
    for (const target of TARGETS) {
      const stage = stages.get(target)!;
      expect(stage.user, target).toBe("node");
      expect(stage.env.NODE_ENV, target).toBe("production");
      expect(stage.stopsignal, target).toBe("SIGTERM");
    }
  });

  it("starts each target from a script in the repository", () => {
    for (const target of TARGETS) {
      const command = effectiveCommand(stages.get(target)!);
      expect(command[0], target).toBe("node");
      expect(existsSync(join(root, command[1]!)), `${target}: ${command[1]}`).toBe(true);
    }
  });

  it("health-checks each service on /healthz at the port its config listens on", async () => {
    for (const target of SERVICE_TARGETS) {
      const stage = stages.get(target)!;
      const check = stage.healthcheck?.join(" ") ?? "";
      expect(check, target).toContain(`process.env.${LISTEN_KEYS[target].port}`);
      expect(check, target).toContain("/healthz");
      // An image carries no identity: the deployment mounts one and names it.
      const config = await loadServiceConfig(target, {
        ...stage.env,
        NATS_NKEY_SEED_FILE: `/creds/${target}.nk`,
      });
      expect(stage.expose, target).toEqual([String(config[LISTEN_KEYS[target].port])]);
    }
    expect(stages.get("node-sim")!.healthcheck?.join(" ")).toContain("127.0.0.1:8000/health");
  });

  it("keeps testcontainers and its Docker and SSH clients out of the production install", () => {
    const lock = JSON.parse(readFileSync(join(root, "package-lock.json"), "utf8")) as {
      packages: Record<string, { dev?: boolean }>;
    };
    for (const pkg of ["testcontainers", "dockerode", "docker-modem", "ssh2"]) {
      const entry = lock.packages[`node_modules/${pkg}`];
      expect(entry, pkg).toBeDefined();
      expect(entry!.dev, `${pkg} is dev-only, so npm ci --omit=dev leaves it out`).toBe(true);
    }
  });

  it("needs no package at run time that `npm ci --omit=dev` leaves out", () => {
    const lock = JSON.parse(readFileSync(join(root, "package-lock.json"), "utf8")) as {
      packages: Record<string, { dev?: boolean; devOptional?: boolean }>;
    };
    const entries = TARGETS.map((t) => effectiveCommand(stages.get(t)!)[1]!);
    for (const [pkg, importer] of runtimeImports(root, entries).packages) {
      const entry = lock.packages[`node_modules/${pkg}`];
      expect(entry, `${pkg} (imported by ${importer}) is in package-lock.json`).toBeDefined();
      expect(
        entry!.dev || entry!.devOptional,
        `${pkg} (imported by ${importer}) is dev-only`,
      ).toBeFalsy();
    }
  });

  /**
   * The dockerignore's patterns, as BuildKit matches them against context-relative paths:
   * `**\/` any depth of folders, `*` within one name.
   */
  const ignored = (() => {
    const patterns = readFileSync(join(root, "deploy/docker/Dockerfile.dockerignore"), "utf8")
      .split("\n")
      .map((l) => l.trim())
      .filter((l) => l !== "" && !l.startsWith("#"));
    return patterns.map((pattern) => ({
      pattern,
      re: new RegExp(
        `^${pattern
          .replace(/[.+^${}()|[\]\\]/g, "\\$&")
          .replace(/\*\*\//g, "\0")
          .replace(/\*/g, "[^/]*")
          .replaceAll("\0", "(?:.*/)?")}(?:/|$)`,
      ),
    }));
  })();

  it("keeps the workspace manifests and sources in the build context", () => {
    const needed = ["package.json", "package-lock.json", ".npmrc", "libs/bus/src/index.ts"];
    needed.push(...TARGETS.map((t) => effectiveCommand(stages.get(t)!)[1]!));
    for (const { pattern, re } of ignored) {
      for (const path of needed) expect(re.test(path), `${pattern} excludes ${path}`).toBe(false);
    }
  });

  it("leaves every secret zml bus-credentials writes out of the build context, wherever it is", async () => {
    // The real command's output, as if written anywhere in the repository (COPY . . would
    // otherwise put every seed and the CA key in every image).
    const out = mkdtempSync(join(tmpdir(), "zml-creds-"));
    try {
      await promisify(execFile)(
        process.execPath,
        [
          join(root, "libs/cli/src/main.ts"),
          "bus-credentials",
          "--out",
          join(out, "creds"),
          "--tls",
        ],
        { cwd: root },
      );
      const files = spawnSync("find", ["creds", "-type", "f"], { cwd: out, encoding: "utf8" })
        .stdout.split("\n")
        .filter(Boolean);
      const secrets = files.filter((f) => f.endsWith(".nk") || f.endsWith("-key.pem"));
      expect(secrets.length).toBeGreaterThan(5);
      for (const where of ["", "bus-creds/", "deploy/k8s/", "some/deep/dir/"]) {
        for (const file of secrets) {
          const path = `${where}${file.replace(/^creds\//, where === "" ? "bus-creds/" : "")}`;
          expect(
            ignored.some(({ re }) => re.test(path)),
            `${path} would be copied into the image`,
          ).toBe(true);
        }
      }
    } finally {
      rmSync(out, { recursive: true, force: true });
    }
  });
});

describe("the containers' commands, run outside Docker", () => {
  it("starts every simulated node with its compose arguments", async () => {
    for (const [name, s] of byTarget("node-sim")) {
      const [, ...args] = effectiveCommand(stageOf(s), s.command);
      // A free loopback port instead of the container's 8000 (the last --port wins).
      await using proc = await startProcess({
        name,
        command: process.execPath,
        args: [...args, "--host=127.0.0.1", "--port=0"],
        cwd: root,
        readyLine: /"event":"ready"/,
      });
      const ready = JSON.parse((await proc.waitForOutput(/\{"event":"ready".*\}/))[0]) as {
        url: string;
        node_id: string;
      };
      expect(ready.node_id).toBe(flag(s.command ?? [], "id")[0]);
      expect((await fetch(`${ready.url}/health`)).status).toBe(200);
    }
  }, 60_000);
});

// `docker compose config` validates against the real Compose schema; it needs only the CLI
// plugin, not an engine, and is not installed on every machine.
const composeCli = spawnSync("docker", ["compose", "version"], { encoding: "utf8" });
const hasComposeCli = composeCli.status === 0;

describe("docker compose config", () => {
  it.skipIf(!hasComposeCli)("accepts the file", () => {
    const result = spawnSync("docker", ["compose", "-f", composeFile, "config", "--quiet"], {
      encoding: "utf8",
    });
    expect(result.stderr).toBe("");
    expect(result.status).toBe(0);
  });
});
