export { parseQuote, INTEL_QE_VENDOR_ID, extractPemCertificates } from "./quote.ts";
export type { TdxQuote, QuoteHeader, TdReportBody, QeReport } from "./quote.ts";
export { QuoteParseError } from "./errors.ts";
export { MAX_QUOTE_BYTES } from "./input.ts";
export { verifyQuote } from "./verify.ts";
export type { VerifyQuoteOptions, VerificationResult, QuoteFields, PckInfo } from "./verify.ts";
export { CHECK_NAMES } from "./check.ts";
export type { Check, CheckName } from "./check.ts";
export { TCB_STATUSES, parseTcbInfo, parseQeIdentity, splitPcsResponse } from "./collateral.ts";
export type {
  Collateral,
  TcbStatus,
  TcbInfo,
  TcbLevel,
  QeIdentity,
  IsvTcbLevel,
  TdxModuleIdentity,
} from "./collateral.ts";
export { CollateralFormatError } from "./shape.ts";
export { parsePckExtension, DerError } from "./der.ts";
export type { PckExtension } from "./der.ts";
export { MEASUREMENT_FIELDS } from "./policy.ts";
export type { VerificationPolicy, MeasurementSet, MeasurementField } from "./policy.ts";
export { INTEL_SGX_ROOT_CA_PEM } from "./intel-root-ca.ts";
export { runVerifyQuoteCommand } from "./verify-quote-command.ts";
export type { VerifyQuoteCommandIo } from "./verify-quote-command.ts";
export {
  REPORT_DATA_DOMAIN,
  reportDataFor,
  spkiSha256,
  certificateKeySha256,
} from "./report-data.ts";
export type { ReportDataBinding } from "./report-data.ts";
