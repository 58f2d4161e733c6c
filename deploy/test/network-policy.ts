// Which connections a set of Kubernetes NetworkPolicies allows, by the rules of the
// NetworkPolicy API (networking.k8s.io/v1): a pod selected by a policy of a direction is
// isolated in that direction and admits only what one of those policies' rules lists; a
// connection needs both the sender's egress and the receiver's ingress. Enough of the API
// for the manifests' checks: label selectors, namespace selectors, IPv4 blocks, numeric ports.

export interface Selector {
  matchLabels?: Record<string, string>;
  matchExpressions?: Array<{ key: string; operator: string; values?: string[] }>;
}

interface Peer {
  podSelector?: Selector;
  namespaceSelector?: Selector;
  ipBlock?: { cidr: string; except?: string[] };
}

interface Rule {
  ports?: Array<{ protocol?: string; port?: number | string; endPort?: number }>;
  from?: Peer[];
  to?: Peer[];
}

export interface NetworkPolicy {
  metadata: { name?: string; namespace?: string };
  spec: {
    podSelector: Selector;
    policyTypes?: string[];
    ingress?: Rule[];
    egress?: Rule[];
  };
}

export type Endpoint =
  | {
      pod: true;
      namespace: string;
      namespaceLabels: Record<string, string>;
      labels: Record<string, string>;
    }
  | { pod: false; ip: string };

export interface Connection {
  from: Endpoint;
  to: Endpoint;
  port: number;
  protocol?: "TCP" | "UDP";
}

export function selects(selector: Selector, labels: Record<string, string>): boolean {
  for (const [k, v] of Object.entries(selector.matchLabels ?? {})) {
    if (labels[k] !== v) return false;
  }
  for (const e of selector.matchExpressions ?? []) {
    const has = Object.hasOwn(labels, e.key);
    const value = labels[e.key];
    const ok =
      e.operator === "In"
        ? has && (e.values ?? []).includes(value!)
        : e.operator === "NotIn"
          ? !has || !(e.values ?? []).includes(value!)
          : e.operator === "Exists"
            ? has
            : e.operator === "DoesNotExist"
              ? !has
              : false;
    if (!ok) return false;
  }
  return true;
}

function ipv4(text: string): number {
  const parts = text.split(".").map(Number);
  if (parts.length !== 4 || parts.some((p) => !Number.isInteger(p) || p < 0 || p > 255)) {
    throw new Error(`not an IPv4 address: ${text}`);
  }
  return parts.reduce((n, p) => n * 256 + p, 0);
}

function inCidr(ip: string, cidr: string): boolean {
  const [base, bits] = cidr.split("/");
  const size = 2 ** (32 - Number(bits));
  return Math.floor(ipv4(ip) / size) === Math.floor(ipv4(base!) / size);
}

/** Does this peer of a rule (in `policyNamespace`) name that endpoint? */
function peerMatches(peer: Peer, policyNamespace: string, e: Endpoint): boolean {
  if (peer.ipBlock) {
    // Blocks are meant for addresses outside the cluster; which pod IPs they match is up to
    // the network plugin, so a check never relies on that.
    if (e.pod) return false;
    const { cidr, except = [] } = peer.ipBlock;
    return inCidr(e.ip, cidr) && !except.some((x) => inCidr(e.ip, x));
  }
  if (!e.pod) return false;
  const namespaceOk = peer.namespaceSelector
    ? selects(peer.namespaceSelector, e.namespaceLabels)
    : e.namespace === policyNamespace;
  const podOk = peer.podSelector ? selects(peer.podSelector, e.labels) : true;
  return namespaceOk && podOk;
}

function ruleAdmits(
  rule: Rule,
  peers: Peer[] | undefined,
  ns: string,
  c: Connection,
  other: Endpoint,
) {
  const protocol = c.protocol ?? "TCP";
  const portOk =
    !rule.ports?.length ||
    rule.ports.some(
      (p) =>
        (p.protocol ?? "TCP") === protocol &&
        (p.port === undefined ||
          (typeof p.port === "number" && c.port >= p.port && c.port <= (p.endPort ?? p.port))),
    );
  const peerOk = !peers?.length || peers.some((peer) => peerMatches(peer, ns, other));
  return portOk && peerOk;
}

function sideAllows(
  policies: readonly NetworkPolicy[],
  direction: "Ingress" | "Egress",
  self: Endpoint,
  other: Endpoint,
  c: Connection,
): boolean {
  // Endpoints outside the cluster are not subject to its policies.
  if (!self.pod) return true;
  const relevant = policies.filter(
    (p) =>
      (p.metadata.namespace ?? "default") === self.namespace &&
      selects(p.spec.podSelector, self.labels) &&
      (p.spec.policyTypes ?? ["Ingress"]).includes(direction),
  );
  if (relevant.length === 0) return true;
  return relevant.some((p) => {
    const ns = p.metadata.namespace ?? "default";
    const rules = direction === "Ingress" ? (p.spec.ingress ?? []) : (p.spec.egress ?? []);
    return rules.some((r) => ruleAdmits(r, direction === "Ingress" ? r.from : r.to, ns, c, other));
  });
}

/** Whether the policies let `from` open a connection to `to` on that port. */
export function allows(policies: readonly NetworkPolicy[], c: Connection): boolean {
  return (
    sideAllows(policies, "Egress", c.from, c.to, c) &&
    sideAllows(policies, "Ingress", c.to, c.from, c)
  );
}
