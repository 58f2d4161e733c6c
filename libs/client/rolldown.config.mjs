import { defineConfig } from "rolldown";
import { thirdPartyNotices } from "../../deploy/build/third-party-notices.mjs";

export default defineConfig({
  input: "src/index.ts",
  platform: "node",
  output: { format: "esm", file: "dist/index.js" },
  plugins: [thirdPartyNotices()],
});
