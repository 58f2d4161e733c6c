// Test-only helpers: synthetic Intel-shaped PKI, collateral and quotes. Never import from
// production code; nothing here chains to Intel's root.
export { buildTestQuoteV4 } from "./test-quote.ts";
export type { TestQuoteOptions } from "./test-quote.ts";
export {
  createTestPki,
  createTestCollateral,
  createTestCrl,
  createSelfSignedCertificate,
} from "./test-ca.ts";
export type {
  TestPki,
  TestCert,
  TestPlatform,
  TestPkiOptions,
  TestCollateralOptions,
} from "./test-ca.ts";
export { createTestTee, TEST_MRTD, TEST_RTMR3 } from "./test-tee.ts";
export type { TestTee, TestTeeOptions, TestNodeTee, TestQuoteSigner } from "./test-tee.ts";
