import { Counter, Gauge, Histogram } from "@zml/telemetry";
import type { Registry } from "@zml/telemetry";

export interface AttestationMetrics {
  /** Attestations by outcome: `ok` or the failure's reason code. */
  attestations: Counter<"outcome">;
  duration: Histogram;
  /** Verify requests by outcome: `result` or the error code. */
  verifyRequests: Counter<"outcome">;
  revocations: Gauge;
}

export function createAttestationMetrics(registry: Registry): AttestationMetrics {
  return {
    attestations: new Counter({
      name: "zml_attestation_attestations_total",
      help: "Node attestations by outcome (ok, or the reason code of the failure)",
      labelNames: ["outcome"],
      registers: [registry],
    }),
    duration: new Histogram({
      name: "zml_attestation_duration_seconds",
      help: "Time to fetch and verify one quote",
      buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
      registers: [registry],
    }),
    verifyRequests: new Counter({
      name: "zml_attestation_verify_requests_total",
      help: "zml.attestation.verify requests by outcome (result, or the error code)",
      labelNames: ["outcome"],
      registers: [registry],
    }),
    revocations: new Gauge({
      name: "zml_attestation_revocations",
      help: "Entries in the revocation list",
      registers: [registry],
    }),
  };
}
