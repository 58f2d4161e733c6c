/**
 * Local fakes of the cloud price APIs the cost feed reads, speaking each provider's own wire
 * format so that the real clients (`@aws-sdk/client-ec2`, plain HTTPS for Azure and GCP) run
 * against them unchanged: EC2 `DescribeSpotPriceHistory` (Query protocol, XML), the Azure
 * Retail Prices API and the Cloud Billing Catalog API (JSON pages). Each takes faults on
 * demand (throttling, expired credentials, malformed answers, outages).
 */
export { CLOUD_FAULT_KINDS } from "./http-fake.ts";
export type { CloudFake, CloudFaultKind } from "./http-fake.ts";
export { startEc2Fake } from "./ec2.ts";
export type { Ec2Call, Ec2Fake, Ec2FakeOptions, SpotPricePoint } from "./ec2.ts";
export { startAzurePricesFake } from "./azure.ts";
export type { AzureFake, AzureMeter } from "./azure.ts";
export { startGcpBillingFake } from "./gcp.ts";
export type { GcpFake, GcpSku } from "./gcp.ts";
