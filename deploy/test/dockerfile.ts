// A reader for the subset of Dockerfile syntax deploy/docker/Dockerfile uses, so tests can
// check what an image would run without a Docker engine.

export interface Stage {
  name: string;
  /** The image or earlier stage this one starts from. */
  from: string;
  /** ENV of this stage and the stages it builds on. */
  env: Record<string, string>;
  entrypoint: string[] | undefined;
  cmd: string[] | undefined;
  /** The HEALTHCHECK command (exec form). */
  healthcheck: string[] | undefined;
  user: string | undefined;
  stopsignal: string | undefined;
  expose: string[];
  /** Build-context sources of COPY instructions without `--from` (this stage only). */
  copySources: string[];
  /** RUN commands (this stage only), flags such as `--mount` removed. */
  runs: string[];
}

/** A JSON array (exec form) or a Dockerfile error. */
function execForm(rest: string, instruction: string): string[] {
  const parsed: unknown = JSON.parse(rest);
  if (!Array.isArray(parsed) || !parsed.every((a) => typeof a === "string")) {
    throw new Error(`${instruction} must use the exec form (a JSON array of strings): ${rest}`);
  }
  return parsed;
}

/** Drops leading `--flag=value` options of an instruction. */
function withoutFlags(rest: string): { flags: string[]; body: string } {
  const flags: string[] = [];
  let body = rest;
  for (let m = /^--(\S+)\s+/.exec(body); m; m = /^--(\S+)\s+/.exec(body)) {
    flags.push(m[1]!);
    body = body.slice(m[0].length);
  }
  return { flags, body };
}

/**
 * Splits a Dockerfile into stages. Later stages inherit ENV, ENTRYPOINT, CMD, HEALTHCHECK,
 * USER and STOPSIGNAL from the stage they are built `FROM`, as Docker does.
 */
export function parseDockerfile(text: string): Map<string, Stage> {
  const stages = new Map<string, Stage>();
  const lines = text
    .replace(/\\\r?\n/g, " ")
    .split(/\r?\n/)
    .map((l) => l.trim())
    .filter((l) => l !== "" && !l.startsWith("#"));
  let stage: Stage | undefined;
  for (const line of lines) {
    const [, instruction = "", rest = ""] = /^(\S+)\s*(.*)$/.exec(line) ?? [];
    const op = instruction.toUpperCase();
    if (op === "FROM") {
      const m = /^(\S+)(?:\s+AS\s+(\S+))?$/i.exec(rest);
      if (!m) throw new Error(`cannot read FROM ${rest}`);
      const parent = stages.get(m[1]!);
      stage = {
        name: m[2] ?? m[1]!,
        from: m[1]!,
        env: { ...parent?.env },
        entrypoint: parent?.entrypoint,
        cmd: parent?.cmd,
        healthcheck: parent?.healthcheck,
        user: parent?.user,
        stopsignal: parent?.stopsignal,
        expose: [...(parent?.expose ?? [])],
        copySources: [],
        runs: [],
      };
      stages.set(stage.name, stage);
      continue;
    }
    if (op === "ARG" && stage === undefined) continue;
    if (stage === undefined) throw new Error(`${op} before the first FROM`);
    switch (op) {
      case "ENV": {
        // KEY=value pairs; a value with spaces is in double quotes (no escapes inside).
        const pairs = /^(?:[A-Za-z_][A-Za-z0-9_]*=(?:"[^"]*"|[^\s"]*)(?:\s+|$))+$/;
        if (!pairs.test(rest)) throw new Error(`ENV must use KEY=value pairs: ${rest}`);
        for (const [, key, quoted, plain] of rest.matchAll(
          /([A-Za-z_][A-Za-z0-9_]*)=(?:"([^"]*)"|([^\s"]*))/g,
        )) {
          stage.env[key!] = quoted ?? plain ?? "";
        }
        break;
      }
      case "ENTRYPOINT":
        stage.entrypoint = execForm(rest, op);
        // Docker resets an inherited CMD when ENTRYPOINT is set.
        stage.cmd = undefined;
        break;
      case "CMD":
        stage.cmd = execForm(rest, op);
        break;
      case "HEALTHCHECK": {
        const m = /\bCMD\s+(\[.*\])$/.exec(rest);
        if (!m) throw new Error(`HEALTHCHECK must use CMD in exec form: ${rest}`);
        stage.healthcheck = execForm(m[1]!, op);
        break;
      }
      case "USER":
        stage.user = rest;
        break;
      case "STOPSIGNAL":
        stage.stopsignal = rest;
        break;
      case "EXPOSE":
        stage.expose.push(...rest.split(/\s+/));
        break;
      case "COPY": {
        const { flags, body } = withoutFlags(rest);
        if (flags.some((f) => f.startsWith("from="))) break;
        const parts = body.split(/\s+/);
        stage.copySources.push(...parts.slice(0, -1));
        break;
      }
      case "RUN":
        stage.runs.push(withoutFlags(rest).body);
        break;
      case "WORKDIR":
      case "ARG":
      case "LABEL":
        break;
      default:
        throw new Error(`instruction ${op} is not understood by this reader`);
    }
  }
  return stages;
}

/** What a container of `stage` runs, with `command` (compose `command:`) replacing CMD. */
export function effectiveCommand(stage: Stage, command?: string[]): string[] {
  return [...(stage.entrypoint ?? []), ...(command ?? stage.cmd ?? [])];
}
