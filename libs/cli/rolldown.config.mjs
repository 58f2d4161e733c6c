import { defineConfig } from "rolldown";
import { thirdPartyNotices } from "../../deploy/build/third-party-notices.mjs";

export default defineConfig({
  input: "src/main.ts",
  platform: "node",
  output: { format: "esm", file: "dist/zml.js", minify: true, codeSplitting: false },
  plugins: [thirdPartyNotices()],
});
