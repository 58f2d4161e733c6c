// The Kubernetes deployment (deploy/k8s) cannot be applied here (no cluster), so this checks
// what can be checked without one: `kubectl kustomize` renders it; every rendered object is
// valid against the Kubernetes API schema, strictly (k8s-schema.ts); and what an operator
// relies on holds: replicas, probes on the ports each service really listens on, disruption
// budgets, autoscalers, a 3-server NATS cluster with JetStream whose config nats-server
// accepts with the credentials make-secrets.sh makes, network policies that deny by default
// and allow each needed flow, and pods that run unprivileged with pinned images.
import { execFile, execFileSync } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { parseFleetDocument } from "@zml/fleet";
import { busOptionsOf, connectBus } from "@zml/bus";
import {
  findFreePort,
  findNatsServerBinary,
  pollUntil,
  repoRoot,
  startProcess,
} from "@zml/harness";
import type { ManagedProcess } from "@zml/harness";
import { createLogger } from "@zml/telemetry";
import { afterAll, describe, expect, it } from "vitest";
import { parseAllDocuments } from "yaml";
import { describeObject, validateObjects } from "./k8s-schema.ts";
import type { K8sObject } from "./k8s-schema.ts";
import { allows } from "./network-policy.ts";
import type { Endpoint, NetworkPolicy } from "./network-policy.ts";
import {
  configKeys,
  LISTEN_KEYS,
  loadServiceConfig,
  METRICS_KEYS,
  natsSize,
  SERVICE_TARGETS,
  STANDARD_ENV,
} from "./service-config.ts";

const run = promisify(execFile);
const root = repoRoot();
const k8sDir = join(root, "deploy/k8s");
const NAMESPACE = "zml";
/** The JetStream replica setting (docs/operations.md): every stream and bucket on 3 servers. */
const REPLICAS_SETTING = "NATS_REPLICAS";
/**
 * The durability setting the pods' nats-server 2.11 runs with; Debian's 2.9.10, which the tests
 * run the rendered config with, does not know it, so it is taken out for those runs only.
 */
const SYNC_ALWAYS = /^\s+sync_interval: always\n/m;
const forLocalServer = (conf: string): string => conf.replace(SYNC_ALWAYS, "");

function kubectlKustomize(dir: string): K8sObject[] {
  let out: string;
  try {
    out = execFileSync("kubectl", ["kustomize", dir], { encoding: "utf8", stdio: "pipe" });
  } catch (err) {
    const e = err as { code?: string; stderr?: string };
    if (e.code === "ENOENT") {
      throw new Error("kubectl is missing: run `bash deploy/dev/bootstrap.sh --for-tests`", {
        cause: err,
      });
    }
    throw new Error(`kubectl kustomize ${dir} failed: ${e.stderr ?? String(err)}`, { cause: err });
  }
  return parseAllDocuments(out)
    .map((d) => d.toJS() as K8sObject | null)
    .filter((o): o is K8sObject => o !== null);
}

interface Container {
  name: string;
  image: string;
  args?: string[];
  env?: Array<{ name: string; value?: string; valueFrom?: unknown }>;
  ports?: Array<{ name?: string; containerPort: number }>;
  readinessProbe?: { httpGet?: { path: string; port: number | string } };
  livenessProbe?: { httpGet?: { path: string; port: number | string } };
  startupProbe?: { httpGet?: { path: string; port: number | string } };
  resources?: { requests?: Record<string, string>; limits?: Record<string, string> };
  securityContext?: {
    runAsNonRoot?: boolean;
    runAsUser?: number;
    allowPrivilegeEscalation?: boolean;
    readOnlyRootFilesystem?: boolean;
    capabilities?: { drop?: string[]; add?: string[] };
  };
  volumeMounts?: Array<{ name: string; mountPath: string }>;
  lifecycle?: { preStop?: { exec?: { command?: string[] } } };
}
interface PodSpec {
  automountServiceAccountToken?: boolean;
  terminationGracePeriodSeconds?: number;
  serviceAccountName?: string;
  securityContext?: { runAsNonRoot?: boolean; runAsUser?: number };
  containers: Container[];
  initContainers?: Container[];
  volumes?: Array<{ name: string; secret?: { secretName: string }; configMap?: { name: string } }>;
}
interface Workload extends K8sObject {
  spec: {
    replicas?: number;
    selector?: { matchLabels: Record<string, string> };
    serviceName?: string;
    volumeClaimTemplates?: Array<{ metadata: { name: string } }>;
    template: { metadata: { labels: Record<string, string> }; spec: PodSpec };
  };
}

const objects = kubectlKustomize(k8sDir);
const ofKind = <T extends K8sObject = K8sObject>(kind: string) =>
  objects.filter((o) => o.kind === kind) as T[];
const named = <T extends K8sObject = K8sObject>(kind: string, name: string): T => {
  const found = ofKind<T>(kind).find((o) => o.metadata?.name === name);
  if (!found) throw new Error(`no ${kind}/${name} in the rendered manifests`);
  return found;
};
const workloads = objects.filter((o) =>
  ["Deployment", "StatefulSet", "Job"].includes(o.kind),
) as Workload[];
const configMap = (prefix: string) => {
  const found = ofKind<K8sObject & { data: Record<string, string> }>("ConfigMap").find((c) =>
    c.metadata?.name?.startsWith(`${prefix}-`),
  );
  if (!found) throw new Error(`no ConfigMap ${prefix}-<hash>`);
  return found;
};
const envOf = (c: Container): Record<string, string> =>
  Object.fromEntries(
    (c.env ?? []).flatMap((e) => (e.value === undefined ? [] : [[e.name, e.value]])),
  );

/** The Secrets make-secrets.sh prints, made once into a scratch credentials directory. */
const scratch = mkdtempSync(join(tmpdir(), "zml-k8s-"));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));
let secretsMade: Promise<Map<string, Record<string, string>>> | undefined;
function madeSecrets() {
  secretsMade ??= run("bash", [join(k8sDir, "make-secrets.sh"), join(scratch, "creds")], {
    encoding: "utf8",
  }).then(({ stdout }) => {
    const secrets = new Map<string, Record<string, string>>();
    for (const doc of parseAllDocuments(stdout)) {
      const s = doc.toJS() as (K8sObject & { data: Record<string, string> }) | null;
      if (s === null) continue;
      expect(s.kind).toBe("Secret");
      expect(s.metadata?.namespace).toBe(NAMESPACE);
      const files = Object.entries(s.data).map(([k, v]): [string, string] => [
        k,
        Buffer.from(v, "base64").toString(),
      ]);
      secrets.set(s.metadata!.name!, Object.fromEntries(files));
    }
    return secrets;
  });
  return secretsMade;
}

// The schema checks compile the schema's declarations: seconds on a loaded machine.
describe("kubectl kustomize deploy/k8s", { timeout: 60_000 }, () => {
  it("renders every object into the zml namespace", () => {
    expect(objects.length).toBeGreaterThan(20);
    for (const o of objects) {
      if (o.kind === "Namespace") expect(o.metadata?.name).toBe(NAMESPACE);
      else expect(o.metadata?.namespace, describeObject(o)).toBe(NAMESPACE);
    }
  });

  it("uses only stable API versions that current Kubernetes serves", () => {
    const stable = [
      "v1",
      "apps/v1",
      "batch/v1",
      "policy/v1",
      "autoscaling/v2",
      "networking.k8s.io/v1",
    ];
    for (const o of objects) expect(stable, describeObject(o)).toContain(o.apiVersion);
  });

  it("is valid against the Kubernetes API schema, unknown fields rejected", async () => {
    expect(await validateObjects(objects)).toEqual([]);
  });

  it("fails validation once a manifest has a typo'd field", async () => {
    const copy = join(scratch, "broken");
    cpSync(k8sDir, copy, { recursive: true });
    const file = join(copy, "dispatcher.yaml");
    const text = readFileSync(file, "utf8");
    expect(text).toContain("readinessProbe:");
    writeFileSync(file, text.replace("readinessProbe:", "readinesProbe:"));
    const problems = await validateObjects(kubectlKustomize(copy));
    expect(problems).toEqual([
      { object: "Deployment/dispatcher", message: expect.stringContaining("readinesProbe") },
    ]);
  });
});

describe("the four services", () => {
  it.each(SERVICE_TARGETS)(
    "%s: a Deployment of at least 2 replicas whose probes hit the port its config listens on",
    async (target) => {
      const d = named<Workload>("Deployment", target);
      expect(d.spec.replicas).toBeGreaterThanOrEqual(2);
      const [c] = d.spec.template.spec.containers as [Container];
      const env = envOf(c);
      // The environment is the service's own config, and its loadConfig accepts it.
      const known = configKeys(target);
      for (const key of Object.keys(env)) {
        if (STANDARD_ENV.test(key)) continue;
        expect(known, `${target}: ${key}`).toContain(key);
      }
      const config = await loadServiceConfig(target, env);
      expect(config[LISTEN_KEYS[target].host]).toBe("0.0.0.0");
      expect(env[REPLICAS_SETTING]).toBe("3");
      // The drain ends before the kubelet's kill: grace plus the preStop pause fit in the period.
      const preStopSeconds = Number(c.lifecycle?.preStop?.exec?.command?.[1] ?? 0);
      expect((config.ZML_SHUTDOWN_GRACE_MS as number) / 1000 + preStopSeconds).toBeLessThan(
        d.spec.template.spec.terminationGracePeriodSeconds ?? 30,
      );
      expect(env.NATS_URL).toBe("nats://nats:4222");
      expect(config.NATS_INSECURE).toBe(false);
      const port = config[LISTEN_KEYS[target].port];
      const portOf = (ref: number | string) =>
        typeof ref === "number" ? ref : c.ports?.find((p) => p.name === ref)?.containerPort;
      expect(c.readinessProbe?.httpGet?.path).toBe("/readyz");
      expect(c.livenessProbe?.httpGet?.path).toBe("/healthz");
      expect(portOf(c.readinessProbe!.httpGet!.port)).toBe(port);
      expect(portOf(c.livenessProbe!.httpGet!.port)).toBe(port);
      // Prometheus scrapes the port /metrics is on, on every interface.
      const annotations = (d.spec.template.metadata as { annotations?: Record<string, string> })
        .annotations;
      expect(annotations?.["prometheus.io/port"]).toBe(String(config[METRICS_KEYS[target].port]));
      expect(annotations?.["prometheus.io/path"]).toBe("/metrics");
      expect(config[METRICS_KEYS[target].host]).toBe("0.0.0.0");
    },
  );

  it.each(SERVICE_TARGETS)("%s: a disruption budget that leaves a replica up", (target) => {
    const d = named<Workload>("Deployment", target);
    const pdbs = ofKind<
      K8sObject & {
        spec: { minAvailable?: number; selector: { matchLabels: Record<string, string> } };
      }
    >("PodDisruptionBudget").filter((p) =>
      Object.entries(p.spec.selector.matchLabels).every(
        ([k, v]) => d.spec.template.metadata.labels[k] === v,
      ),
    );
    expect(pdbs).toHaveLength(1);
    expect(pdbs[0]!.spec.minAvailable).toBeGreaterThanOrEqual(1);
    expect(pdbs[0]!.spec.minAvailable).toBeLessThan(d.spec.replicas!);
  });

  it("autoscales intake and dispatcher (and only them) from a floor of 2", () => {
    const hpas = ofKind<
      K8sObject & {
        spec: {
          scaleTargetRef: { kind: string; name: string };
          minReplicas: number;
          maxReplicas: number;
        };
      }
    >("HorizontalPodAutoscaler");
    expect(
      hpas.map((h) => `${h.spec.scaleTargetRef.kind}/${h.spec.scaleTargetRef.name}`).sort(),
    ).toEqual(["Deployment/dispatcher", "Deployment/intake"]);
    for (const h of hpas) {
      expect(h.spec.minReplicas).toBeGreaterThanOrEqual(2);
      expect(h.spec.maxReplicas).toBeGreaterThan(h.spec.minReplicas);
    }
  });
});

describe("intake's two listeners", () => {
  const d = named<Workload>("Deployment", "intake");
  const c = d.spec.template.spec.containers[0]!;
  const labels = d.spec.template.metadata.labels;
  const portOf = (ref: number | string | undefined) =>
    typeof ref === "number" ? ref : c.ports?.find((p) => p.name === ref)?.containerPort;
  const listeners = async () => {
    const config = await loadServiceConfig("intake", envOf(c));
    return { client: config.ZML_PORT as number, admin: config.ZML_ADMIN_PORT as number };
  };

  it("serves /metrics, /openapi.json and the admin API on an admin port of their own", async () => {
    const { client, admin } = await listeners();
    expect(admin).toBeGreaterThan(0);
    expect(admin).not.toBe(client);
    expect(c.ports?.map((p) => p.containerPort).sort()).toEqual([client, admin].sort());
    // Probes ask the listener the Service sends clients to (both answer /healthz, /readyz).
    expect(portOf(c.readinessProbe?.httpGet?.port)).toBe(client);
    expect(portOf(c.livenessProbe?.httpGet?.port)).toBe(client);
  });

  it("is exposed by Services on the client port only", async () => {
    const { client, admin } = await listeners();
    const services = ofKind<
      K8sObject & {
        spec: { selector?: Record<string, string>; ports: Array<{ targetPort?: number | string }> };
      }
    >("Service").filter(
      (svc) =>
        svc.spec.selector !== undefined &&
        Object.entries(svc.spec.selector).every(([k, v]) => labels[k] === v),
    );
    expect(services.map((svc) => svc.metadata?.name)).toEqual(["intake"]);
    const targets = services.flatMap((svc) => svc.spec.ports.map((p) => portOf(p.targetPort)));
    expect(targets).toEqual([client]);
    expect(targets).not.toContain(admin);
  });
});

// make-secrets.sh runs the CLI: seconds on a loaded machine.
describe("every pod", { timeout: 60_000 }, () => {
  const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as { version: string };
  const containers = workloads.flatMap((w) =>
    [...w.spec.template.spec.containers, ...(w.spec.template.spec.initContainers ?? [])].map(
      (c) => ({ w, c }),
    ),
  );

  it("runs a pinned image: no `latest`, ZML's at the workspace version", () => {
    expect(containers.length).toBeGreaterThanOrEqual(6);
    for (const { w, c } of containers) {
      const where = `${describeObject(w)} ${c.name}`;
      const [, name, tag] = /^(.+):([\w.-]+)$/.exec(c.image) ?? [];
      expect(tag, `${where}: ${c.image} has a tag`).toBeDefined();
      expect(tag, where).not.toBe("latest");
      expect(tag, where).toMatch(/^v?\d+\.\d+\.\d+/);
      if (name!.startsWith("zml/")) expect(tag, where).toBe(pkg.version);
    }
    expect(named<Workload>("StatefulSet", "nats").spec.template.spec.containers[0]!.image).toBe(
      "nats:2.11.1-alpine",
    );
  });

  it("runs as non-root, read-only, with no capabilities and no service account token", () => {
    for (const { w, c } of containers) {
      const pod = w.spec.template.spec;
      const where = `${describeObject(w)} ${c.name}`;
      const nonRoot = c.securityContext?.runAsNonRoot ?? pod.securityContext?.runAsNonRoot;
      const uid = c.securityContext?.runAsUser ?? pod.securityContext?.runAsUser;
      expect(nonRoot, where).toBe(true);
      expect(uid, where).toBeGreaterThan(0);
      expect(c.securityContext?.allowPrivilegeEscalation, where).toBe(false);
      expect(c.securityContext?.readOnlyRootFilesystem, where).toBe(true);
      expect(c.securityContext?.capabilities?.drop, where).toEqual(["ALL"]);
      expect(c.securityContext?.capabilities?.add ?? [], where).toEqual([]);
      expect(pod.automountServiceAccountToken, where).toBe(false);
      const account = named<K8sObject & { automountServiceAccountToken?: boolean }>(
        "ServiceAccount",
        pod.serviceAccountName ?? "default",
      );
      expect(account.automountServiceAccountToken, where).toBe(false);
    }
  });

  it("leaves the image's memory settings to it: no Node flags, compile cache or malloc setting overridden", () => {
    // The image sets them (deploy/docker/Dockerfile, checked in compose.test.ts); other V8
    // flags in NODE_OPTIONS would miss its compile cache, which is kept per set of flags.
    for (const { w, c } of containers) {
      for (const e of c.env ?? []) {
        expect(e.name, `${describeObject(w)} ${c.name}`).not.toMatch(
          /^(NODE_OPTIONS|NODE_COMPILE_CACHE|MALLOC_[A-Z_]+)$/,
        );
      }
    }
  });

  it("requests and limits CPU and memory", () => {
    for (const { w, c } of containers) {
      const where = `${describeObject(w)} ${c.name}`;
      expect(Object.keys(c.resources?.requests ?? {}).sort(), where).toEqual(["cpu", "memory"]);
      expect(Object.keys(c.resources?.limits ?? {}).sort(), where).toEqual(["cpu", "memory"]);
    }
  });

  it("mounts only Secrets make-secrets.sh makes, holding every file the pod is told to read", async () => {
    const secrets = await madeSecrets();
    for (const w of workloads) {
      const pod = w.spec.template.spec;
      for (const c of pod.containers) {
        for (const m of c.volumeMounts ?? []) {
          const secretName = pod.volumes?.find((v) => v.name === m.name)?.secret?.secretName;
          if (secretName === undefined) continue;
          const files = secrets.get(secretName);
          expect(files, `${describeObject(w)}: Secret ${secretName}`).toBeDefined();
          // Every *_FILE setting under this mount names a file of the Secret.
          for (const [key, value] of Object.entries(envOf(c))) {
            if (!key.endsWith("_FILE") || !value.startsWith(`${m.mountPath}/`)) continue;
            expect(Object.keys(files!), `${describeObject(w)} ${key}`).toContain(
              value.slice(m.mountPath.length + 1),
            );
          }
        }
      }
    }
    // Each service gets its own identity only.
    for (const target of SERVICE_TARGETS) {
      expect(Object.keys(secrets.get(`zml-bus-${target}`)!).sort()).toEqual(
        [`${target}.nk`, "ca.pem"].sort(),
      );
    }
  });
});

describe("the NATS cluster", { timeout: 60_000 }, () => {
  const sts = named<Workload>("StatefulSet", "nats");
  const conf = configMap("nats-config").data["nats.conf"]!;

  it("is a StatefulSet of 3 servers, each with its own volume, behind a headless Service", () => {
    expect(sts.spec.replicas).toBe(3);
    expect(sts.spec.volumeClaimTemplates?.map((v) => v.metadata.name)).toEqual(["data"]);
    const headless = named<
      K8sObject & {
        spec: {
          clusterIP?: string;
          publishNotReadyAddresses?: boolean;
          ports: Array<{ port: number }>;
        };
      }
    >("Service", sts.spec.serviceName!);
    expect(headless.spec.clusterIP).toBe("None");
    expect(headless.spec.publishNotReadyAddresses).toBe(true);
    expect(headless.spec.ports.map((p) => p.port)).toEqual(expect.arrayContaining([4222, 6222]));
    const pdb = named<K8sObject & { spec: { maxUnavailable?: number } }>(
      "PodDisruptionBudget",
      "nats",
    );
    expect(pdb.spec.maxUnavailable).toBe(1);
  });

  it("runs JetStream on the volume and routes to each of the three pods by its stable name", () => {
    const c = sts.spec.template.spec.containers[0]!;
    expect(c.args).toEqual(["--config", "/etc/nats/config/nats.conf"]);
    expect(c.volumeMounts).toContainEqual(
      expect.objectContaining({ name: "data", mountPath: "/data" }),
    );
    expect(conf).toMatch(/^jetstream \{\n\s+store_dir: "\/data\/jetstream"/m);
    expect(conf).toMatch(SYNC_ALWAYS);
    expect(conf).toMatch(/^cluster \{[\s\S]*port: 6222/m);
    const routes = [...conf.matchAll(/"nats-route:\/\/([^"]+)"/g)].map((m) => m[1]);
    expect(routes).toEqual(
      [0, 1, 2].map((i) => `nats-${i}.${sts.spec.serviceName}.${NAMESPACE}.svc.cluster.local:6222`),
    );
    expect(c.ports?.map((p) => p.containerPort).sort()).toEqual([4222, 6222, 8222]);
  });

  it("probes the monitoring port as the NATS Helm chart does", () => {
    const c = sts.spec.template.spec.containers[0]!;
    // Started once JetStream is wholly current; alive while JetStream is on; ready while the
    // server is current with the meta leader, whatever one stream does.
    expect(c.startupProbe?.httpGet).toEqual({ path: "/healthz", port: "monitor" });
    expect(c.livenessProbe?.httpGet).toEqual({
      path: "/healthz?js-enabled-only=true",
      port: "monitor",
    });
    expect(c.readinessProbe?.httpGet).toEqual({
      path: "/healthz?js-server-only=true",
      port: "monitor",
    });
    expect(c.ports).toContainEqual({ name: "monitor", containerPort: 8222 });
  });

  it("is accepted by nats-server with the credentials make-secrets.sh makes, and carries intake's largest body", async () => {
    const secrets = await madeSecrets();
    // The pod's mounts, laid out in a scratch directory: /etc/nats/{config,creds}.
    const etc = join(scratch, "etc-nats");
    mkdirSync(join(etc, "config"), { recursive: true });
    mkdirSync(join(etc, "creds"), { recursive: true });
    for (const [file, text] of Object.entries(secrets.get("zml-nats-server")!)) {
      writeFileSync(join(etc, "creds", file), text);
    }
    writeFileSync(
      join(etc, "config", "nats.conf"),
      forLocalServer(conf).replaceAll("/etc/nats/", `${etc}/`),
    );
    const { stdout, stderr } = await run(
      findNatsServerBinary()!,
      ["-c", join(etc, "config", "nats.conf"), "-t"],
      { env: { ...process.env, POD_NAME: "nats-0" }, encoding: "utf8" },
    );
    expect(`${stdout}${stderr}`).toContain("is valid");
    // The authorization names every service identity.
    const auth = secrets.get("zml-nats-server")!["auth.conf"]!;
    for (const target of SERVICE_TARGETS) expect(auth).toContain(`# ${target}\n`);
    // The server certificate names what clients and peers dial.
    const san = execFileSync("openssl", ["x509", "-noout", "-ext", "subjectAltName"], {
      input: secrets.get("zml-nats-server")!["server.pem"],
      encoding: "utf8",
    });
    expect(san).toContain("DNS:nats,");
    expect(san).toContain(`DNS:*.${sts.spec.serviceName}.${NAMESPACE}.svc.cluster.local`);

    const maxPayload = natsSize(/^max_payload:\s*(\S+)$/m.exec(conf)?.[1] ?? "1MB");
    const intake = named<Workload>("Deployment", "intake").spec.template.spec.containers[0]!;
    const config = await loadServiceConfig("intake", envOf(intake));
    expect(maxPayload).toBeGreaterThanOrEqual((config.ZML_BODY_LIMIT_BYTES as number) + 64 * 1024);
  });
});

/** A Secret's files written into a fresh directory, as its volume would mount them. */
function mountSecret(files: Record<string, string>, dir: string): string {
  mkdirSync(dir, { recursive: true });
  for (const [file, text] of Object.entries(files)) writeFileSync(join(dir, file), text);
  return dir;
}

// The rendered nats.conf run for real: three nats-servers on loopback, each with the file as
// its pod gets it, only the mount paths, the route names and the ports mapped to this
// machine. (Tests run Debian's nats-server 2.9.10; the pods run 2.11.1.)
describe("the NATS cluster, run from the rendered config", { timeout: 120_000 }, () => {
  const sts = named<Workload>("StatefulSet", "nats");
  const conf = configMap("nats-config").data["nats.conf"]!;
  const pod = sts.spec.template.spec.containers[0]!;
  const probes = {
    startup: pod.startupProbe!.httpGet!.path,
    liveness: pod.livenessProbe!.httpGet!.path,
    readiness: pod.readinessProbe!.httpGet!.path,
  };
  const probeStatus = async (port: number, path: string) =>
    (await fetch(`http://127.0.0.1:${port}${path}`)).status;

  it("forms a JetStream cluster over its TLS routes, admitting `zml apply` and each service's identity", async () => {
    const secrets = await madeSecrets();
    const base = join(scratch, "cluster");
    const etc = join(base, "etc-nats");
    mountSecret(secrets.get("zml-nats-server")!, join(etc, "creds"));
    mkdirSync(join(etc, "config"), { recursive: true });
    const ports: Array<{ client: number; cluster: number; monitor: number }> = [];
    for (let i = 0; i < 3; i++) {
      ports.push({
        client: await findFreePort(),
        cluster: await findFreePort(),
        monitor: await findFreePort(),
      });
    }
    const servers: ManagedProcess[] = [];
    try {
      for (const [i, p] of ports.entries()) {
        let text = forLocalServer(conf)
          .replaceAll("/etc/nats/", `${etc}/`)
          .replace('"/data/jetstream"', JSON.stringify(join(base, `data-${i}`)))
          .replace('"/var/run/nats/nats.pid"', JSON.stringify(join(base, `nats-${i}.pid`)))
          .replace(/^port: 4222$/m, `port: ${p.client}`)
          .replace(/^http: 8222$/m, `http: ${p.monitor}`)
          .replace(/^(\s+)port: 6222$/m, `$1port: ${p.cluster}`);
        for (const [j, q] of ports.entries()) {
          const route = `nats-route://nats-${j}.${sts.spec.serviceName}.${NAMESPACE}.svc.cluster.local:6222`;
          expect(text).toContain(route);
          text = text.replace(route, `nats-route://127.0.0.1:${q.cluster}`);
        }
        const file = join(etc, "config", `nats-${i}.conf`);
        writeFileSync(file, text);
        servers.push(
          await startProcess({
            name: `nats-${i}`,
            command: findNatsServerBinary()!,
            args: ["-c", file],
            env: { POD_NAME: `nats-${i}` },
            readyLine: /Server is ready/,
          }),
        );
        // Alone, the first server is alive but neither started nor ready: without a quorum
        // there is no meta leader. (A server that ignored the readiness query would pass
        // that too; the bad value below tells it reads the parameter.)
        if (i === 0) {
          expect(await probeStatus(p.monitor, probes.liveness)).toBe(200);
          expect(await probeStatus(p.monitor, probes.readiness)).toBe(503);
          expect(await probeStatus(p.monitor, probes.startup)).toBe(503);
          const badValue = probes.readiness.replace(/=true$/, "=not-a-bool");
          expect(await probeStatus(p.monitor, badValue)).toBe(400);
        }
      }
      // Formed, as each server reports it: wholly current (/healthz, the startup probe),
      // routes to the other two, and a JetStream meta group of three with a leader. A server
      // can be healthy a moment before it counts the third peer, so all of it is polled for.
      const monitor = async (p: (typeof ports)[number], path: string) => {
        const res = await fetch(`http://127.0.0.1:${p.monitor}${path}`);
        return { status: res.status, body: (await res.json()) as Record<string, unknown> };
      };
      const state = async (p: (typeof ports)[number]) => {
        const [health, routez, jsz] = await Promise.all(
          ["/healthz", "/routez", "/jsz"].map((path) => monitor(p, path)),
        );
        const meta = jsz!.body.meta_cluster as
          { cluster_size?: number; leader?: string } | undefined;
        return {
          healthy: health!.status,
          routes: routez!.body.num_routes,
          peers: meta?.cluster_size,
          leader: /^nats-[012]$/.test(meta?.leader ?? ""),
        };
      };
      const formed = { healthy: 200, routes: 2, peers: 3, leader: true };
      await pollUntil(
        async () => {
          const states = await Promise.all(ports.map((p) => state(p).catch(() => undefined)));
          if (states.every((st) => JSON.stringify(st) === JSON.stringify(formed))) return true;
          // Not formed yet: what each server says ends up in the timeout's message.
          throw new Error(`servers report ${JSON.stringify(states)}`);
        },
        { timeoutMs: 60_000, intervalMs: 250, message: "a formed 3-server JetStream cluster" },
      );
      for (const p of ports) {
        expect(await state(p)).toEqual(formed);
        for (const path of Object.values(probes)) {
          expect(await probeStatus(p.monitor, path), path).toBe(200);
        }
      }
      const url = `nats://127.0.0.1:${ports[0]!.client}`;

      // The fleet-apply Job's command, with its Secret and the fleet ConfigMap mounted.
      const job = named<Workload>("Job", "fleet-apply").spec.template.spec.containers[0]!;
      const adminDir = mountSecret(secrets.get("zml-bus-admin")!, join(base, "admin-creds"));
      const fleetDir = mountSecret(configMap("zml-fleet").data, join(base, "fleet"));
      const args = job.args!.map((a) =>
        a.replace("/etc/zml/", `${fleetDir}/`).replace("nats://nats:4222", url),
      );
      const env = Object.fromEntries(
        Object.entries(envOf(job)).map(([k, v]) => [k, v.replace("/creds/", `${adminDir}/`)]),
      );
      const applied = await run(process.execPath, [join(root, "libs/cli/src/main.ts"), ...args], {
        env: { ...process.env, ...env },
        encoding: "utf8",
      });
      expect(applied.stdout).toMatch(/h100-a/);

      // Each service connects with the environment and Secret its pod gets.
      const log = createLogger({ service: "k8s-test", level: "fatal" });
      for (const target of SERVICE_TARGETS) {
        const c = named<Workload>("Deployment", target).spec.template.spec.containers[0]!;
        const dir = mountSecret(secrets.get(`zml-bus-${target}`)!, join(base, `${target}-creds`));
        const podEnv = Object.fromEntries(
          Object.entries(envOf(c)).map(([k, v]) => [
            k,
            v.replace("/creds/", `${dir}/`).replace("nats://nats:4222", url),
          ]),
        );
        const config = (await loadServiceConfig(target, podEnv)) as unknown as Parameters<
          typeof busOptionsOf
        >[0];
        const bus = await connectBus({
          ...busOptionsOf(config, target),
          name: `k8s-${target}`,
          log,
        });
        await bus.flush();
        await bus.drain();
      }
    } finally {
      await Promise.all(servers.map((s) => s.kill()));
    }
  });
});

describe("the fleet-apply Job", () => {
  const job = named<Workload>("Job", "fleet-apply");
  const pod = job.spec.template.spec;
  const c = pod.containers[0]!;

  it("runs `zml apply -f` as admin on the fleet ConfigMap's file, a valid fleet", () => {
    expect(c.image).toMatch(/^zml\/cli:/);
    expect(c.args?.slice(0, 2)).toEqual(["apply", "-f"]);
    const fleetPath = c.args![2]!;
    const mount = c.volumeMounts!.find((m) => fleetPath.startsWith(`${m.mountPath}/`))!;
    const volume = pod.volumes!.find((v) => v.name === mount.name)!;
    const cm = configMap("zml-fleet");
    expect(volume.configMap?.name).toBe(cm.metadata?.name);
    const text = cm.data[fleetPath.slice(mount.mountPath.length + 1)]!;
    const fleet = parseFleetDocument(text);
    expect(fleet.nodes.length).toBeGreaterThan(0);
    expect(envOf(c).NATS_NKEY_SEED_FILE).toBe("/creds/admin.nk");
    expect(c.args).toEqual(expect.arrayContaining(["--nats", "nats://nats:4222"]));
  });
});

describe("the network policies", () => {
  const policies = ofKind("NetworkPolicy") as unknown as NetworkPolicy[];
  const inZml = (labels: Record<string, string>): Endpoint => ({
    pod: true,
    namespace: NAMESPACE,
    namespaceLabels: { "kubernetes.io/metadata.name": NAMESPACE },
    labels,
  });
  const podOf = (kind: string, name: string) =>
    inZml(named<Workload>(kind, name).spec.template.metadata.labels);
  const nats = podOf("StatefulSet", "nats");
  const stranger = inZml({ app: "something-else" });
  const prometheus: Endpoint = {
    pod: true,
    namespace: "monitoring",
    namespaceLabels: { "kubernetes.io/metadata.name": "monitoring" },
    labels: { app: "prometheus" },
  };
  const dns: Endpoint = {
    pod: true,
    namespace: "kube-system",
    namespaceLabels: { "kubernetes.io/metadata.name": "kube-system" },
    labels: { "k8s-app": "kube-dns" },
  };
  const internet: Endpoint = { pod: false, ip: "203.0.113.7" };
  const fleet = parseFleetDocument(configMap("zml-fleet").data["fleet.yaml"]!);
  const nodePorts = [...new Set(fleet.nodes.map((n) => Number(new URL(n.endpoint).port || 80)))];

  it("deny everything to and from every pod unless a policy allows it", () => {
    const denyAll = policies.find(
      (p) =>
        Object.keys(p.spec.podSelector).length === 0 &&
        !p.spec.ingress?.length &&
        !p.spec.egress?.length,
    );
    expect(denyAll?.spec.policyTypes?.sort()).toEqual(["Egress", "Ingress"]);
    expect(allows(policies, { from: stranger, to: nats, port: 4222 })).toBe(false);
    expect(allows(policies, { from: stranger, to: internet, port: 443 })).toBe(false);
    expect(allows(policies, { from: internet, to: nats, port: 4222 })).toBe(false);
    expect(
      allows(policies, { from: internet, to: podOf("Deployment", "dispatcher"), port: 9101 }),
    ).toBe(false);
    expect(
      allows(policies, { from: podOf("Deployment", "intake"), to: internet, port: 8000 }),
    ).toBe(false);
  });

  it("let every ZML pod resolve names and reach NATS, and the servers reach each other", () => {
    const clients = [
      ...SERVICE_TARGETS.map((t) => podOf("Deployment", t)),
      podOf("Job", "fleet-apply"),
    ];
    for (const from of [...clients, nats]) {
      expect(allows(policies, { from, to: dns, port: 53, protocol: "UDP" })).toBe(true);
    }
    for (const from of clients) expect(allows(policies, { from, to: nats, port: 4222 })).toBe(true);
    expect(allows(policies, { from: nats, to: nats, port: 6222 })).toBe(true);
    expect(allows(policies, { from: clients[0]!, to: nats, port: 6222 })).toBe(false);
  });

  it("let anyone reach intake's client API port, and nothing else of it", async () => {
    const intake = podOf("Deployment", "intake");
    const c = named<Workload>("Deployment", "intake").spec.template.spec.containers[0]!;
    const config = await loadServiceConfig("intake", envOf(c));
    const [client, admin] = [config.ZML_PORT as number, config.ZML_ADMIN_PORT as number];
    expect(allows(policies, { from: internet, to: intake, port: client })).toBe(true);
    expect(allows(policies, { from: internet, to: intake, port: 9101 })).toBe(false);
    // The admin listener: Prometheus in `monitoring`, and no one else: not from outside the
    // cluster, nor a pod labelled like Prometheus in another namespace.
    expect(allows(policies, { from: prometheus, to: intake, port: admin })).toBe(true);
    const lookalike: Endpoint = {
      pod: true,
      namespace: "apps",
      namespaceLabels: { "kubernetes.io/metadata.name": "apps" },
      labels: { app: "prometheus" },
    };
    for (const from of [internet, lookalike]) {
      expect(allows(policies, { from, to: intake, port: admin })).toBe(false);
    }
    // Prometheus gets no more of intake than the admin listener (and the client port).
    expect(allows(policies, { from: prometheus, to: intake, port: 9101 })).toBe(false);
  });

  it("let the dispatcher, aggregator and attestation reach the fleet's nodes, never link-local", () => {
    const inference: Endpoint = {
      pod: true,
      namespace: "inference",
      namespaceLabels: { "kubernetes.io/metadata.name": "inference" },
      labels: { app: "vllm" },
    };
    for (const name of ["dispatcher", "health-aggregator", "attestation"]) {
      const from = podOf("Deployment", name);
      for (const port of nodePorts) {
        expect(allows(policies, { from, to: inference, port }), `${name} → ${port}`).toBe(true);
        expect(allows(policies, { from, to: internet, port }), `${name} → ${port}`).toBe(true);
      }
      expect(allows(policies, { from, to: { pod: false, ip: "169.254.169.254" }, port: 80 })).toBe(
        false,
      );
    }
  });

  it("let the monitoring namespace scrape every service and NATS's monitoring port", () => {
    for (const target of SERVICE_TARGETS) {
      const d = named<Workload>("Deployment", target);
      const port = Number(
        (d.spec.template.metadata as { annotations?: Record<string, string> }).annotations?.[
          "prometheus.io/port"
        ],
      );
      expect(allows(policies, { from: prometheus, to: podOf("Deployment", target), port })).toBe(
        true,
      );
    }
    expect(allows(policies, { from: prometheus, to: nats, port: 8222 })).toBe(true);
    expect(allows(policies, { from: stranger, to: nats, port: 8222 })).toBe(false);
  });
});

describe("docs/operations.md", { timeout: 60_000 }, () => {
  const doc = readFileSync(join(root, "docs/operations.md"), "utf8");

  it("gives the commands that deploy this tree and names every Secret they make", async () => {
    expect(doc).toContain("kubectl apply -f deploy/k8s/namespace.yaml\n");
    expect(doc).toContain("deploy/k8s/make-secrets.sh ~/zml-bus-creds | kubectl apply -f -\n");
    expect(doc).toContain("kubectl apply -k deploy/k8s\n");
    for (const name of (await madeSecrets()).keys()) expect(doc).toContain(`\`${name}\``);
    expect(doc).toContain("kubectl -n zml rollout restart deployment/dispatcher");
    expect(doc).toContain("kubectl -n zml rollout restart statefulset/nats");
  });
});
