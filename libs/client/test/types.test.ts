import type {
  AttestationCheck as GatewayAttestationCheck,
  ChatCompletionRequest as GatewayChatRequest,
  InferRequest as GatewayInferRequest,
  RoutingInfo as GatewayRoutingInfo,
} from "@zml/contracts";
import type {
  Collateral as TdxCollateral,
  MeasurementField as TdxMeasurementField,
  MeasurementSet as TdxMeasurementSet,
} from "@zml/tdx";
import { describe, expectTypeOf, it } from "vitest";
import type {
  AttestationCheck,
  ChatCompletionRequest,
  Collateral,
  InferRequest,
  MeasurementField,
  MeasurementSet,
  RoutingInfo,
} from "../src/index.ts";

/**
 * The SDK declares its public types itself (it ships without dependencies). `tsc` checks
 * here that every request the gateway's schemas accept is one the SDK can send, and that
 * the routing shapes agree.
 */
describe("the SDK's types match the gateway's schemas", () => {
  it("requests", () => {
    expectTypeOf<GatewayInferRequest>().toExtend<InferRequest>();
    expectTypeOf<GatewayChatRequest>().toExtend<ChatCompletionRequest>();
    expectTypeOf<Required<InferRequest>>().toExtend<Required<GatewayInferRequest>>();
  });
  it("routing", () => {
    expectTypeOf<RoutingInfo>().toEqualTypeOf<GatewayRoutingInfo>();
  });
  it("attestation verification", () => {
    expectTypeOf<AttestationCheck>().toEqualTypeOf<GatewayAttestationCheck>();
    expectTypeOf<Collateral>().toEqualTypeOf<TdxCollateral>();
    expectTypeOf<MeasurementField>().toEqualTypeOf<TdxMeasurementField>();
    expectTypeOf<MeasurementSet>().toEqualTypeOf<TdxMeasurementSet>();
  });
});
