import type { NodeAddressPolicy } from "@zml/contracts";
import { createHash, randomBytes } from "node:crypto";
import { AccountSpecSchema, KV_BUCKETS, ZmlError } from "@zml/contracts";
import type { FastifyInstance, FastifyRequest } from "fastify";
import { z } from "zod";
import type { ZodOpenApiOperationObject, ZodOpenApiPathsObject } from "zod-openapi";
import { ADMIN_RESOURCES, findResource, pascal } from "../admin/resources.ts";
import type { AdminResource } from "../admin/resources.ts";
import type { ConfigStore, StoredDoc } from "../admin/store.ts";
import { parseJsonObject, zodError } from "../request/validation.ts";
import { ADMIN_TOKEN, AnyObjectSchema, json } from "./docs.ts";

export interface AdminRouteDeps {
  store: ConfigStore;
  /** Throws ZmlError `unauthorized` unless the admin credential is presented. */
  checkAdmin: (authorization: string | undefined) => void;
  /** Where nodes may be registered (see `ZML_NODE_ALLOW_CIDRS` / `ZML_NODE_DENY_CIDRS`). */
  nodeAddresses: NodeAddressPolicy;
  clock: () => number;
}

type KeyParams = { kind: string; key: string };

/**
 * The admin API under `/admin/v1/`: every configuration document (nodes, models, policies,
 * accounts, costs, quality scores, approved measurements, revocations) can be listed, read,
 * put and deleted. Documents are validated with the same schemas the services read them
 * with and stored in NATS KV, which every service watches: changes apply without restarts.
 * A put of an identical document changes nothing (`"action": "unchanged"`).
 */
export function adminRoutes(deps: AdminRouteDeps) {
  return (app: FastifyInstance) => {
    app.addHook("onRequest", (req, _reply, done) => {
      try {
        deps.checkAdmin(req.headers.authorization);
        done();
      } catch (err) {
        done(err as Error);
      }
    });

    app.get("/admin/v1", () => ({ kinds: ADMIN_RESOURCES.map((r) => r.kind) }));

    app.get<{ Params: { kind: string } }>("/admin/v1/:kind", async (req) => {
      const resource = resourceOf(req.params.kind);
      const docs = await deps.store.list(resource.bucket);
      const live = await liveStates(deps.store, resource);
      const now = deps.clock();
      return {
        object: "list",
        kind: resource.kind,
        data: docs.map((d) => present(d, resource, now, live)),
      };
    });

    app.get<{ Params: KeyParams }>("/admin/v1/:kind/:key", async (req) => {
      const resource = resourceOf(req.params.kind);
      const key = keyOf(resource, req.params.key);
      const doc = await deps.store.get(resource.bucket, key);
      if (!doc) throw notFound(resource, key);
      const live = resource.live ? await deps.store.get(resource.live.bucket, key) : undefined;
      return present(doc, resource, deps.clock(), new Map(live ? [[key, live]] : []));
    });

    app.put<{ Params: KeyParams }>("/admin/v1/:kind/:key", async (req, reply) => {
      const resource = resourceOf(req.params.kind);
      const key = keyOf(resource, req.params.key);
      const result = await putDocument(deps, resource, key, bodyOf(req));
      return reply.code(result.action === "created" ? 201 : 200).send(result);
    });

    app.delete<{ Params: KeyParams }>("/admin/v1/:kind/:key", async (req) => {
      const resource = resourceOf(req.params.kind);
      const key = keyOf(resource, req.params.key);
      if (!(await deps.store.delete(resource.bucket, key))) throw notFound(resource, key);
      return { kind: resource.kind, key, action: "deleted" };
    });

    app.post<{ Params: { key: string } }>("/admin/v1/accounts/:key/keys", async (req, reply) => {
      const accounts = resourceOf("accounts");
      const id = keyOf(accounts, req.params.key);
      return reply.code(201).send(await addApiKey(deps.store, id));
    });
  };
}

async function putDocument(
  deps: AdminRouteDeps,
  resource: AdminResource,
  key: string,
  doc: Record<string, unknown>,
) {
  const existing = await deps.store.get(resource.bucket, key);
  const ctx = { now: deps.clock(), store: deps.store, existing, nodeAddresses: deps.nodeAddresses };
  if (resource.idField) {
    const id = doc[resource.idField];
    if (id === undefined) doc[resource.idField] = key;
    else if (id !== key) {
      throw new ZmlError(
        "invalid_request",
        `'${resource.idField}' must match the key in the path ('${key}')`,
        { param: resource.idField },
      );
    }
  }
  await resource.prepare?.(doc, ctx);
  const parsed = resource.schema.safeParse(doc);
  if (!parsed.success) throw zodError(parsed.error, doc, true);
  const document = parsed.data as Record<string, unknown>;
  await resource.check?.(document, ctx);
  const value = JSON.stringify(document);
  const action = !existing ? "created" : existing.value === value ? "unchanged" : "updated";
  if (action !== "unchanged") await deps.store.put(resource.bucket, key, value);
  return { kind: resource.kind, key, action, document };
}

/**
 * Issues a new API key for an account: only its SHA-256 is stored; the key itself is in
 * this answer and nowhere else. The account is updated compare-and-set so a concurrent
 * change is never overwritten.
 */
async function addApiKey(store: ConfigStore, id: string) {
  for (let attempt = 0; attempt < 5; attempt++) {
    const doc = await store.get(KV_BUCKETS.accounts, id);
    if (!doc) throw new ZmlError("not_found", `no accounts/${id}`, { param: "key" });
    const account = AccountSpecSchema.parse(JSON.parse(doc.value));
    const apiKey = `zml_${randomBytes(32).toString("base64url")}`;
    const sha256 = createHash("sha256").update(apiKey).digest("hex");
    account.api_key_sha256 = [...account.api_key_sha256, sha256];
    if (await store.put(KV_BUCKETS.accounts, id, JSON.stringify(account), doc.revision)) {
      return { account: id, api_key: apiKey, sha256 };
    }
  }
  throw new ZmlError("internal_error", "account kept changing; retry");
}

function resourceOf(kind: string): AdminResource {
  const resource = findResource(kind);
  if (!resource) throw new ZmlError("not_found", `no admin resource '${kind}'`, { param: "kind" });
  return resource;
}

function keyOf(resource: AdminResource, raw: string): string {
  const parsed = resource.key.safeParse(raw);
  if (!parsed.success) {
    throw new ZmlError(
      "invalid_request",
      `invalid ${resource.kind} key: ${parsed.error.issues[0]!.message}`,
      { param: "key" },
    );
  }
  return parsed.data;
}

function bodyOf(req: FastifyRequest): Record<string, unknown> {
  if (!Buffer.isBuffer(req.body) || req.body.length === 0) {
    throw new ZmlError("invalid_request", "request body is required", { param: "body" });
  }
  return parseJsonObject(req.body) as Record<string, unknown>;
}

function notFound(resource: AdminResource, key: string): ZmlError {
  return new ZmlError("not_found", `no ${resource.kind}/${key}`, { param: "key" });
}

/** The live state of every document of `resource` that has one, by key. */
async function liveStates(
  store: ConfigStore,
  resource: AdminResource,
): Promise<ReadonlyMap<string, StoredDoc>> {
  if (!resource.live) return new Map();
  return new Map((await store.list(resource.live.bucket)).map((d) => [d.key, d]));
}

function present(
  doc: StoredDoc,
  resource: AdminResource,
  now: number,
  live: ReadonlyMap<string, StoredDoc> = new Map(),
) {
  const document = JSON.parse(doc.value) as unknown;
  const status = resource.status?.(document, now);
  const state = live.get(doc.key);
  return {
    key: doc.key,
    revision: doc.revision,
    document,
    ...(status === undefined ? {} : { status }),
    ...(resource.live
      ? { state: state === undefined ? null : resource.live.view(JSON.parse(state.value)) }
      : {}),
  };
}

/**
 * The admin API in the OpenAPI document, and its documents by name: each kind's schema as
 * stored (`NodeSpec`, defaults filled in) and as put (`NodeSpecInput`, defaults optional), so
 * generated clients get an accurate type for each direction.
 */
export function adminApiDocs(): {
  paths: ZodOpenApiPathsObject;
  schemas: Record<string, z.ZodType>;
} {
  const paths: ZodOpenApiPathsObject = {};
  const schemas: Record<string, z.ZodType> = {};
  const operation = (
    operationId: string,
    summary: string,
    description: string,
    parts: Pick<ZodOpenApiOperationObject, "requestParams" | "requestBody" | "responses">,
  ): ZodOpenApiOperationObject => ({
    operationId,
    tags: ["admin"],
    summary,
    description,
    security: ADMIN_TOKEN,
    ...parts,
  });
  const keyParam = (key: z.ZodType<string>, description: string) => ({
    path: z.object({ key: key.meta({ description }) }),
  });
  for (const r of ADMIN_RESOURCES) {
    const name = pascal(r.kind);
    // Two copies, unlinked to the original (a copy linked to it would be written as a
    // reference to it), each named for the one direction it is used in.
    const stored = r.schema.clone(r.schema._zod.def);
    const put = r.schema.clone(r.schema._zod.def);
    schemas[r.component] = stored;
    schemas[`${r.component}Input`] = put;
    const storedDoc = z.looseObject({
      key: z.string(),
      revision: z.number().int(),
      document: stored,
    });
    const requestParams = keyParam(r.key, "The document's key");
    const idRule = r.idField
      ? ` \`${r.idField}\` must equal the key (it is filled from the key when omitted).`
      : "";
    paths[`/admin/v1/${r.kind}`] = {
      get: operation(
        `adminList${name}`,
        `List ${r.kind}`,
        `Every stored document of ${r.kind}, with its key and revision.`,
        {
          responses: {
            "200": {
              description: "Every stored document",
              content: json(z.looseObject({ data: z.array(storedDoc) })),
            },
          },
        },
      ),
    };
    paths[`/admin/v1/${r.kind}/{key}`] = {
      get: operation(
        `adminGet${name}`,
        `Read one of ${r.kind}`,
        "The stored document under the key, as the services read it.",
        {
          requestParams,
          responses: { "200": { description: "The document", content: json(storedDoc) } },
        },
      ),
      put: operation(
        `adminPut${name}`,
        `Create or replace one of ${r.kind}`,
        `Validated like \`zml apply\`; takes effect without restarts.${idRule}`,
        {
          requestParams,
          requestBody: { required: true, content: json(put) },
          responses: {
            "200": {
              description: "Updated, or unchanged when identical",
              content: json(AnyObjectSchema),
            },
            "201": { description: "Created", content: json(AnyObjectSchema) },
          },
        },
      ),
      delete: operation(
        `adminDelete${name}`,
        `Delete one of ${r.kind}`,
        "Removes the document; services drop it from memory at once.",
        { requestParams, responses: { "200": { description: "Deleted" } } },
      ),
    };
  }
  paths["/admin/v1/accounts/{key}/keys"] = {
    post: operation(
      "adminIssueAccountKey",
      "Issue a new API key for an account",
      "Only the key's SHA-256 is stored; the key appears in this answer only.",
      {
        requestParams: keyParam(findResource("accounts")!.key, "The account's id"),
        responses: {
          "201": {
            description: "The new key",
            content: json(
              z.object({ account: z.string(), api_key: z.string(), sha256: z.string() }),
            ),
          },
        },
      },
    ),
  };
  return { paths, schemas };
}
