// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * mpa-xdp steering program.
 *
 * Every frame on the interface passes through here. A TCP segment whose 4-tuple is in
 * `flows` belongs to a connection the data path has adopted: it goes to the AF_XDP socket
 * bound to the receiving queue (`xsks`), or is dropped when that queue has none. It is never
 * passed to the kernel, whose (frozen, TCP_REPAIR) socket for the flow must not see it.
 * Everything else (handshakes of unknown flows, ARP, ND, other protocols, frames that do not
 * parse) is passed to the kernel unchanged.
 *
 * Built with plain UAPI headers and libbpf's bpf_helpers.h; clang 14 or later.
 *
 * The map layouts below are mirrored in Rust (bpf/src/flow.rs, bpf/src/counters.rs); the
 * Rust side checks the key and value sizes when it loads the object.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

/* Capacities; keep in sync with MAX_QUEUES / MAX_FLOWS in bpf/src/lib.rs. */
#define MAX_QUEUES 64
#define MAX_FLOWS 16384

/* IPv4 frag_off bits (include/net/ip.h is not UAPI). */
#define IP_MF 0x2000
#define IP_OFFSET 0x1fff

/* One 802.1Q / 802.1ad tag (struct vlan_hdr is not UAPI). */
struct vlan_tag {
	__be16 tci;
	__be16 encap_proto;
};

/*
 * "local" is this host: the packet's destination. "remote" is the packet's source.
 * IPv4 addresses live in [0] of the arrays, the rest are zero. Ports and addresses are in
 * network byte order. 40 octets, no implicit padding.
 */
struct flow_key {
	__u8 family; /* 4 or 6 */
	__u8 pad[3];
	__be16 local_port;
	__be16 remote_port;
	__be32 local_addr[4];
	__be32 remote_addr[4];
};

struct flow_value {
	__u32 flow_id; /* chosen by the data path; not interpreted here */
	__u32 flags;   /* reserved, 0 */
};

/* Invariant: seen == redirected + steered_no_xsk + passed; malformed counts a subset of passed. */
struct xdp_counters {
	__u64 seen;
	__u64 redirected;     /* flow hit, bpf_redirect_map returned XDP_REDIRECT */
	__u64 passed;         /* XDP_PASS */
	__u64 malformed;      /* truncated or invalid Ethernet/VLAN/IP/TCP header (passed) */
	__u64 steered_no_xsk; /* flow hit, no XSK for the queue: dropped */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_FLOWS);
	__type(key, struct flow_key);
	__type(value, struct flow_value);
} flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, MAX_QUEUES);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xdp_counters);
} counters SEC(".maps");

enum parse_result {
	PARSE_TCP,       /* key filled in */
	PARSE_OTHER,     /* well formed, not a steerable TCP segment */
	PARSE_MALFORMED, /* truncated or invalid header */
};

#define COUNT(c, field)                                                                            \
	do {                                                                                       \
		if (c)                                                                             \
			(c)->field++;                                                              \
	} while (0)

/* TCP header at l4: ports into the key, data offset sane and inside the frame. */
static __always_inline enum parse_result parse_tcp(void *l4, void *data_end, struct flow_key *key)
{
	struct tcphdr *tcp = l4;
	__u32 hdr_len;

	if ((void *)(tcp + 1) > data_end)
		return PARSE_MALFORMED;
	hdr_len = tcp->doff * 4;
	if (hdr_len < sizeof(*tcp))
		return PARSE_MALFORMED;
	if (l4 + hdr_len > data_end)
		return PARSE_MALFORMED;
	key->local_port = tcp->dest;
	key->remote_port = tcp->source;
	return PARSE_TCP;
}

/*
 * IPv4 with options (any IHL >= 5). Non-first fragments carry no TCP header: they are
 * passed (a steered flow should not fragment; DF is the norm for TCP). tot_len is not
 * checked against the frame: with generic XDP a GRO/BIG TCP skb may carry tot_len 0 or a
 * length beyond the linear data, and such a frame of a steered flow must still be steered.
 */
static __always_inline enum parse_result parse_ipv4(void *l3, void *data_end, struct flow_key *key)
{
	struct iphdr *ip = l3;
	__u32 hdr_len;

	if ((void *)(ip + 1) > data_end)
		return PARSE_MALFORMED;
	if (ip->version != 4)
		return PARSE_MALFORMED;
	hdr_len = ip->ihl * 4;
	if (hdr_len < sizeof(*ip))
		return PARSE_MALFORMED;
	if (l3 + hdr_len > data_end)
		return PARSE_MALFORMED;
	if (ip->frag_off & bpf_htons(IP_OFFSET))
		return PARSE_OTHER;
	if (ip->protocol != IPPROTO_TCP)
		return PARSE_OTHER;

	key->family = 4;
	key->local_addr[0] = ip->daddr;
	key->remote_addr[0] = ip->saddr;
	return parse_tcp(l3 + hdr_len, data_end, key);
}

/* IPv6 fixed header only: a segment behind extension headers is not steered (passed). */
static __always_inline enum parse_result parse_ipv6(void *l3, void *data_end, struct flow_key *key)
{
	struct ipv6hdr *ip6 = l3;

	if ((void *)(ip6 + 1) > data_end)
		return PARSE_MALFORMED;
	if (ip6->version != 6)
		return PARSE_MALFORMED;
	if (ip6->nexthdr != IPPROTO_TCP)
		return PARSE_OTHER;

	key->family = 6;
	__builtin_memcpy(key->local_addr, &ip6->daddr, sizeof(key->local_addr));
	__builtin_memcpy(key->remote_addr, &ip6->saddr, sizeof(key->remote_addr));
	return parse_tcp(ip6 + 1, data_end, key);
}

/* Ethernet, at most one 802.1Q or 802.1ad tag, then IPv4 or IPv6. */
static __always_inline enum parse_result parse_frame(void *data, void *data_end, struct flow_key *key)
{
	struct ethhdr *eth = data;
	void *l3 = eth + 1;
	__be16 proto;

	if (l3 > data_end)
		return PARSE_MALFORMED;
	proto = eth->h_proto;
	if (proto == bpf_htons(ETH_P_8021Q) || proto == bpf_htons(ETH_P_8021AD)) {
		struct vlan_tag *tag = l3;

		if ((void *)(tag + 1) > data_end)
			return PARSE_MALFORMED;
		proto = tag->encap_proto;
		l3 = tag + 1;
	}

	if (proto == bpf_htons(ETH_P_IP))
		return parse_ipv4(l3, data_end, key);
	if (proto == bpf_htons(ETH_P_IPV6))
		return parse_ipv6(l3, data_end, key);
	return PARSE_OTHER;
}

SEC("xdp")
int mpa_steer(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct flow_key key = {};
	struct xdp_counters *c;
	__u32 zero = 0;
	int action;

	c = bpf_map_lookup_elem(&counters, &zero);
	COUNT(c, seen);

	switch (parse_frame(data, data_end, &key)) {
	case PARSE_TCP:
		break;
	case PARSE_MALFORMED:
		COUNT(c, malformed);
		goto pass;
	default:
		goto pass;
	}

	if (!bpf_map_lookup_elem(&flows, &key))
		goto pass;

	/*
	 * A steered flow never reaches the kernel: without an XSK on this queue (or a queue index
	 * beyond the map) the default action is XDP_DROP. XDP_REDIRECT here only means an XSK is
	 * in the map; whether it accepted the frame shows in the socket's XDP_STATISTICS.
	 */
	action = bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_DROP);
	if (action == XDP_REDIRECT)
		COUNT(c, redirected);
	else
		COUNT(c, steered_no_xsk);
	return action;

pass:
	COUNT(c, passed);
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
