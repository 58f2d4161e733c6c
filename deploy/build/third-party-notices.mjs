// A rolldown plugin that writes THIRD-PARTY-NOTICES.txt next to a bundle: the name, version,
// licence and licence text of every npm package whose code the bundle carries. The SDK and the
// CLI ship dependency-free bundles, so the notices their licences require travel in the tarball.
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join, sep } from "node:path";

/** The package folder a bundled module came from, or undefined for our own code. */
function packageDirOf(moduleId) {
  const at = moduleId.lastIndexOf(`${sep}node_modules${sep}`);
  if (at < 0) return undefined;
  const rest = moduleId.slice(at + "/node_modules/".length).split(sep);
  const depth = rest[0]?.startsWith("@") ? 2 : 1;
  return moduleId.slice(0, at + "/node_modules/".length) + rest.slice(0, depth).join(sep);
}

function licenceTextOf(dir) {
  const file = readdirSync(dir).find((f) => /^(licen[cs]e|copying)(\.|$)/i.test(f));
  if (!file) throw new Error(`${dir}: a bundled package without a licence file`);
  return readFileSync(join(dir, file), "utf8").trim();
}

export function thirdPartyNotices() {
  return {
    name: "third-party-notices",
    generateBundle(_options, bundle) {
      const dirs = new Set();
      for (const output of Object.values(bundle)) {
        if (output.type !== "chunk") continue;
        for (const id of output.moduleIds) {
          const dir = packageDirOf(id);
          if (dir && existsSync(join(dir, "package.json"))) dirs.add(dir);
        }
      }
      const notices = [...dirs]
        .map((dir) => {
          const { name, version, license } = JSON.parse(
            readFileSync(join(dir, "package.json"), "utf8"),
          );
          return { name, version, license, text: licenceTextOf(dir) };
        })
        .sort((a, b) => a.name.localeCompare(b.name));
      const body = notices.map((n) => `${n.name}@${n.version} (${n.license})\n\n${n.text}\n`);
      this.emitFile({
        type: "asset",
        fileName: "THIRD-PARTY-NOTICES.txt",
        source:
          "This bundle carries code from the npm packages below, under their licences.\n\n" +
          body.join(`\n${"-".repeat(72)}\n\n`),
      });
    },
  };
}
