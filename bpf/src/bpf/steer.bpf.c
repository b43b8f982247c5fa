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
 * Frames this program cannot take apart down to the TCP ports -- IPv4 and IPv6 fragments,
 * IPv6 with extension headers, and more than one VLAN tag -- could still belong to a steered
 * flow, and the kernel would hand them to its frozen socket. Such a frame is dropped (and
 * counted by class) when it may carry TCP (IPv4 protocol 6; IPv6 next header TCP at the end
 * of the extension-header chain, or a chain this program cannot follow) between a "steered
 * host pair": a (local address, remote address) pair that at least one flow in `flows` has
 * (the `hosts` map, kept by the loader). ARP, ICMP/ICMPv6 (fragmented or not), UDP and any
 * traffic with other hosts are never touched (docs/architecture.md, "XDP steering"). A frame
 * with more VLAN tags than this program looks through is dropped whatever its hosts: its
 * addresses are out of reach.
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

/* Capacities; keep in sync with MAX_QUEUES / MAX_FLOWS / MAX_WATCHED_PORTS / MAX_TS_RECORDS in
 * bpf/src/lib.rs. */
#define MAX_QUEUES 64
#define MAX_FLOWS 16384
#define MAX_WATCHED_PORTS 256
#define MAX_TS_RECORDS 4096
/* Timestamped segments remembered per watched connection. */
#define TS_RECORDS 4

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

/*
 * Invariant: seen == redirected + steered_no_xsk + passed + dropped_fragment + dropped_ipv6_ext
 * + dropped_vlan_stack + dropped_malformed; malformed counts a subset of passed +
 * dropped_malformed.
 */
struct xdp_counters {
	__u64 seen;
	__u64 redirected;         /* flow hit, bpf_redirect_map returned XDP_REDIRECT */
	__u64 passed;             /* XDP_PASS */
	__u64 malformed;          /* truncated or invalid Ethernet/VLAN/IP/TCP header (passed) */
	__u64 steered_no_xsk;     /* flow hit, no XSK for the queue: dropped */
	__u64 dropped_fragment;   /* IPv4/IPv6 fragment, maybe TCP, steered host pair */
	__u64 dropped_ipv6_ext;   /* IPv6 extension headers before TCP, steered host pair */
	__u64 dropped_vlan_stack; /* two or more VLAN tags, inner TCP for a steered host pair */
	__u64 dropped_malformed;  /* malformed behind addresses of a steered host pair */
	__u64 headers_copied;     /* multi-buffer frame whose headers passed the linear part */
};

/*
 * The hosts of the steered flows: the address half of struct flow_key (family, local and
 * remote address), with the number of flows in `flows` that have it. 36 octets.
 */
struct host_key {
	__u8 family; /* 4 or 6 */
	__u8 pad[3];
	__be32 local_addr[4];
	__be32 remote_addr[4];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_FLOWS);
	__type(key, struct flow_key);
	__type(value, struct flow_value);
} flows SEC(".maps");

/*
 * Local TCP ports whose connections are "watched" until their hand-over: the key is the port
 * in network byte order in the low two octets of a __u32 (the rest zero); the value is the
 * number of registrations (kept by the data path, not interpreted here).
 */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_WATCHED_PORTS);
	__type(key, __u32);
	__type(value, __u32);
} watch_ports SEC(".maps");

/*
 * The peer's last TS_RECORDS timestamped segments of each watched, not yet steered connection
 * (docs/environment.md, "Why TS.Recent must be inherited"): SEG.SEQ, SEG.SEQ + length (SYN
 * and FIN count one each) and TSval, host byte order; `next` is the slot the next one takes.
 * An LRU map: connections that never reach their hand-over (refused, a SYN flood on a
 * watched port) cost no more than its size. 56 octets.
 */
struct ts_seg {
	__u32 seq;
	__u32 end;
	__u32 tsval;
};

struct ts_record {
	__u32 next;
	__u32 count;
	struct ts_seg seg[TS_RECORDS];
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_TS_RECORDS);
	__type(key, struct flow_key);
	__type(value, struct ts_record);
} ts_records SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_FLOWS);
	__type(key, struct host_key);
	__type(value, __u32);
} hosts SEC(".maps");

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

/*
 * The headers of a multi-buffer frame whose linear part ends inside them, copied out with
 * bpf_xdp_load_bytes and parsed here instead. Sized for the deepest read parse_frame can
 * make whatever the frame says (8 tags, IPv6, 7 extension headers of 2048 octets and the
 * eighth's first 8), so that the verifier can bound every access by the buffer alone.
 */
#define HDR_COPY 14464
struct hdr_copy {
	__u8 octets[HDR_COPY];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct hdr_copy);
} hdr_copy SEC(".maps");

enum parse_result {
	PARSE_TCP,       /* key filled in */
	PARSE_OTHER,     /* well formed, not a steerable TCP segment */
	PARSE_MALFORMED, /* truncated or invalid header */
	/* Maybe TCP, but not taken apart down to the ports: family and addresses of the key are
	 * filled in, *why says which class. */
	PARSE_UNPARSED,
	/* More VLAN tags than are looked through: not even the addresses were reached. */
	PARSE_TOO_DEEP,
};

enum unparsed {
	UNPARSED_FRAGMENT,
	UNPARSED_IPV6_EXT,
	UNPARSED_VLAN_STACK,
};

/* VLAN tags looked through; a frame with more is dropped (its addresses are out of reach, so
 * it may be a steered flow's: no network stacks this many). */
#define MAX_VLAN_TAGS 8
/* IPv6 extension headers followed; a longer chain counts as "cannot follow". */
#define MAX_IPV6_EXT 8

/* IPv6 next-header values of extension headers (RFC 8200 §4, RFC 7045). */
#define NEXTHDR_HOP 0
#define NEXTHDR_ROUTING 43
#define NEXTHDR_FRAGMENT 44
#define NEXTHDR_AUTH 51
#define NEXTHDR_DEST 60
#define NEXTHDR_MOBILITY 135
#define NEXTHDR_HIP 139
#define NEXTHDR_SHIM6 140
#define NEXTHDR_EXP1 253
#define NEXTHDR_EXP2 254

#define IPV6_FRAG_OFFSET 0xfff8

#define COUNT(c, field)                                                                            \
	do {                                                                                       \
		if (c)                                                                             \
			(c)->field++;                                                              \
	} while (0)

/* Where the TCP header of a parsed segment is, and how long the segment is (the IP payload
 * length the IP header claims: 0 with GRO/BIG TCP, see parse_ipv4). */
struct tcp_seg {
	struct tcphdr *tcp;
	__u32 l4_len;
};

/* TCP header at l4: ports into the key, data offset sane and inside the frame. */
static __always_inline enum parse_result parse_tcp(void *l4, void *data_end, struct flow_key *key,
						   struct tcp_seg *seg)
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
	seg->tcp = tcp;
	return PARSE_TCP;
}

/*
 * IPv4 with options (any IHL >= 5). A fragment (MF set or offset non-zero) is never steered:
 * the data path takes whole segments. tot_len is not checked against the frame: with generic
 * XDP a GRO/BIG TCP skb may carry tot_len 0 or a length beyond the linear data, and such a
 * frame of a steered flow must still be steered. `stacked`: behind two or more VLAN tags.
 */
static __always_inline enum parse_result parse_ipv4(void *l3, void *data_end, struct flow_key *key,
						    int stacked, enum unparsed *why, struct tcp_seg *seg)
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
	if (ip->protocol != IPPROTO_TCP)
		return PARSE_OTHER;

	key->family = 4;
	key->local_addr[0] = ip->daddr;
	key->remote_addr[0] = ip->saddr;
	if (stacked) {
		*why = UNPARSED_VLAN_STACK;
		return PARSE_UNPARSED;
	}
	if (ip->frag_off & bpf_htons(IP_MF | IP_OFFSET)) {
		*why = UNPARSED_FRAGMENT;
		return PARSE_UNPARSED;
	}
	seg->l4_len = bpf_ntohs(ip->tot_len) > hdr_len ? bpf_ntohs(ip->tot_len) - hdr_len : 0;
	return parse_tcp(l3 + hdr_len, data_end, key, seg);
}

static __always_inline int ipv6_ext(__u8 nh)
{
	switch (nh) {
	case NEXTHDR_HOP:
	case NEXTHDR_ROUTING:
	case NEXTHDR_FRAGMENT:
	case NEXTHDR_AUTH:
	case NEXTHDR_DEST:
	case NEXTHDR_MOBILITY:
	case NEXTHDR_HIP:
	case NEXTHDR_SHIM6:
	case NEXTHDR_EXP1:
	case NEXTHDR_EXP2:
		return 1;
	default:
		return 0;
	}
}

/*
 * IPv6. TCP right after the fixed header is steered. Otherwise the extension-header chain is
 * followed (at most MAX_IPV6_EXT headers) to the upper-layer protocol: TCP behind it, a
 * non-first fragment whose fragmentable part starts with TCP or another extension header, or
 * a chain too long to follow is PARSE_UNPARSED; any other upper layer (ICMPv6, UDP, ESP, No
 * Next Header) is PARSE_OTHER. An extension header cut short is PARSE_MALFORMED.
 */
static __always_inline enum parse_result parse_ipv6(void *l3, void *data_end, struct flow_key *key,
						    int stacked, enum unparsed *why, struct tcp_seg *seg)
{
	struct ipv6hdr *ip6 = l3;
	void *p = ip6 + 1;
	int fragment = 0;
	__u8 nh;

	if ((void *)(ip6 + 1) > data_end)
		return PARSE_MALFORMED;
	if (ip6->version != 6)
		return PARSE_MALFORMED;

	key->family = 6;
	__builtin_memcpy(key->local_addr, &ip6->daddr, sizeof(key->local_addr));
	__builtin_memcpy(key->remote_addr, &ip6->saddr, sizeof(key->remote_addr));
	nh = ip6->nexthdr;
	if (nh == IPPROTO_TCP && !stacked) {
		seg->l4_len = bpf_ntohs(ip6->payload_len);
		return parse_tcp(p, data_end, key, seg);
	}

#pragma unroll
	for (int i = 0; i < MAX_IPV6_EXT; i++) {
		__u8 *h = p;

		if (!ipv6_ext(nh))
			break;
		if ((void *)(h + 8) > data_end)
			return PARSE_MALFORMED;
		if (nh == NEXTHDR_FRAGMENT) {
			__be16 off = *(__be16 *)(h + 2);

			fragment = 1;
			nh = h[0];
			if (off & bpf_htons(IPV6_FRAG_OFFSET)) {
				/* A later fragment: what follows is not a header. Judge by the type
				 * of the fragmentable part's first header. */
				if (nh != IPPROTO_TCP && !ipv6_ext(nh))
					return PARSE_OTHER;
				goto unparsed;
			}
			p = h + 8;
		} else if (nh == NEXTHDR_AUTH) {
			nh = h[0];
			p = h + ((__u32)h[1] + 2) * 4;
		} else {
			nh = h[0];
			p = h + ((__u32)h[1] + 1) * 8;
		}
		if (p > data_end)
			return PARSE_MALFORMED;
	}
	/* A chain longer than we follow may hide TCP. */
	if (nh != IPPROTO_TCP && !ipv6_ext(nh))
		return PARSE_OTHER;
unparsed:
	if (stacked)
		*why = UNPARSED_VLAN_STACK;
	else if (fragment)
		*why = UNPARSED_FRAGMENT;
	else
		*why = UNPARSED_IPV6_EXT;
	return PARSE_UNPARSED;
}

/*
 * Ethernet, up to MAX_VLAN_TAGS 802.1Q / 802.1ad tags, then IPv4 or IPv6. One tag is steered
 * like none (the worker then checks the tag against the flow's); two or more are not steered.
 */
static __always_inline enum parse_result parse_frame(void *data, void *data_end, struct flow_key *key,
						     enum unparsed *why, struct tcp_seg *seg)
{
	struct ethhdr *eth = data;
	void *l3 = eth + 1;
	int tags = 0;
	__be16 proto;

	if (l3 > data_end)
		return PARSE_MALFORMED;
	proto = eth->h_proto;
#pragma unroll
	for (int i = 0; i < MAX_VLAN_TAGS; i++) {
		struct vlan_tag *tag = l3;

		if (proto != bpf_htons(ETH_P_8021Q) && proto != bpf_htons(ETH_P_8021AD))
			break;
		if ((void *)(tag + 1) > data_end)
			return PARSE_MALFORMED;
		proto = tag->encap_proto;
		l3 = tag + 1;
		tags++;
	}
	if (proto == bpf_htons(ETH_P_8021Q) || proto == bpf_htons(ETH_P_8021AD))
		return PARSE_TOO_DEEP;

	if (proto == bpf_htons(ETH_P_IP))
		return parse_ipv4(l3, data_end, key, tags > 1, why, seg);
	if (proto == bpf_htons(ETH_P_IPV6))
		return parse_ipv6(l3, data_end, key, tags > 1, why, seg);
	return PARSE_OTHER;
}

/* Whether the frame's host pair (family and addresses of `key`) has a steered flow. */
static __always_inline int steered_hosts(const struct flow_key *key)
{
	struct host_key h = {};

	h.family = key->family;
	__builtin_memcpy(h.local_addr, key->local_addr, sizeof(h.local_addr));
	__builtin_memcpy(h.remote_addr, key->remote_addr, sizeof(h.remote_addr));
	return bpf_map_lookup_elem(&hosts, &h) != 0;
}

/* TCP option kinds (RFC 9293, RFC 7323). */
#define TCPOPT_EOL 0
#define TCPOPT_NOP 1
#define TCPOPT_TIMESTAMP 8
#define TCPOLEN_TIMESTAMP 10
/* Option octets at most (data offset 15). */
#define TCP_MAX_OPTIONS 40
/* Options (a NOP counts as one) looked through for the Timestamps option. Real stacks put at
 * most five before it (FreeBSD's SYN: MSS, NOP, window scale, SACK permitted); each step
 * doubles the paths the verifier walks (an offset used for packet access is tracked
 * precisely, so the paths do not merge), and 40 single steps went past its limit. */
#define TCP_OPT_STEPS 10

/* The TSval of the segment's Timestamps option; 0 when it has none within TCP_OPT_STEPS
 * options (or its options do not parse), which is then simply not recorded. */
static __always_inline int tcp_tsval(struct tcphdr *tcp, void *data_end, __u32 *tsval)
{
	__u8 *opt = (__u8 *)(tcp + 1);
	__u32 len = tcp->doff * 4 - sizeof(*tcp);
	__u32 off = 0;

	for (int i = 0; i < TCP_OPT_STEPS; i++) {
		__u8 *p;
		__u8 kind, olen;

		if (off >= len || off >= TCP_MAX_OPTIONS)
			return 0;
		p = opt + (off & 0x3f);
		if ((void *)(p + 1) > data_end)
			return 0;
		kind = p[0];
		if (kind == TCPOPT_EOL)
			return 0;
		if (kind == TCPOPT_NOP) {
			off++;
			continue;
		}
		if ((void *)(p + 2) > data_end)
			return 0;
		olen = p[1];
		if (olen < 2)
			return 0;
		if (kind == TCPOPT_TIMESTAMP) {
			if (olen != TCPOLEN_TIMESTAMP || off + TCPOLEN_TIMESTAMP > len)
				return 0;
			if ((void *)(p + TCPOLEN_TIMESTAMP) > data_end)
				return 0;
			*tsval = ((__u32)p[2] << 24) | ((__u32)p[3] << 16) | ((__u32)p[4] << 8) | p[5];
			return 1;
		}
		off += olen;
	}
	return 0;
}

/*
 * A segment the kernel will get, of a connection whose local port is watched: remember its
 * sequence range and TSval, so that its hand-over can give the data path the TS.Recent the
 * kernel had (the kernel offers no way to read it). Segments without timestamps and RSTs
 * (which never set TS.Recent) are left out. `tcp_off`: where the TCP header starts in the
 * frame; `l4_len`: the IP payload length.
 *
 * A global (not inlined) function: the verifier checks it once, on its own, instead of once
 * per way through the parser above (which took it past its instruction limit).
 */
__attribute__((noinline)) int record_ts(struct xdp_md *ctx, const struct flow_key *key,
					__u32 tcp_off, __u32 l4_len)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ts_record fresh = {};
	struct ts_record *r;
	struct tcphdr *tcp;
	__u32 port, tsval, hdr_len, len, slot;

	if (!key)
		return 0;
	port = key->local_port;
	if (!bpf_map_lookup_elem(&watch_ports, &port))
		return 0;
	/* Behind at most eight tags and any IPv4 options or IPv6 header (parse_frame). */
	tcp = data + (tcp_off & 0xff);
	if ((void *)(tcp + 1) > data_end)
		return 0;
	if (tcp->rst || !tcp_tsval(tcp, data_end, &tsval))
		return 0;
	hdr_len = tcp->doff * 4;
	len = l4_len > hdr_len ? l4_len - hdr_len : 0;
	len += tcp->syn + tcp->fin;
	r = bpf_map_lookup_elem(&ts_records, key);
	if (!r) {
		bpf_map_update_elem(&ts_records, key, &fresh, BPF_NOEXIST);
		r = bpf_map_lookup_elem(&ts_records, key);
		if (!r)
			return 0;
	}
	slot = r->next % TS_RECORDS;
	r->seg[slot].seq = bpf_ntohl(tcp->seq);
	r->seg[slot].end = bpf_ntohl(tcp->seq) + len;
	r->seg[slot].tsval = tsval;
	r->next = (slot + 1) % TS_RECORDS;
	if (r->count < TS_RECORDS)
		r->count++;
	return 1;
}

/*
 * Multi-buffer (jumbo) frames: the program is loaded frags-aware (BPF_F_XDP_HAS_FRAGS, from
 * the section name), so ctx->data..data_end is only the frame's linear part. Drivers and veth
 * put at least the first page there, so the headers are read in place; only when that parse
 * ran off the end of a linear part that is not the whole frame are the frame's first octets
 * copied out (hdr_copy) and parsed again, so that headers straddling a fragment boundary are
 * judged as a whole and a frame truncated for real stays malformed.
 */
SEC("xdp.frags")
int mpa_steer(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct flow_key key = {};
	struct xdp_counters *c;
	__u32 zero = 0;
	enum unparsed why = UNPARSED_FRAGMENT;
	struct tcp_seg seg = {};
	enum parse_result res;
	int action;

	c = bpf_map_lookup_elem(&counters, &zero);
	COUNT(c, seen);

	res = parse_frame(data, data_end, &key, &why, &seg);
	if (res == PARSE_MALFORMED && bpf_xdp_get_buff_len(ctx) > (__u64)(data_end - data)) {
		struct hdr_copy *h = bpf_map_lookup_elem(&hdr_copy, &zero);
		__u64 len = bpf_xdp_get_buff_len(ctx);

		if (len > HDR_COPY)
			len = HDR_COPY;
		if (h && len > 0 && !bpf_xdp_load_bytes(ctx, 0, h->octets, len)) {
			COUNT(c, headers_copied);
			data = h->octets;
			data_end = h->octets + len;
			__builtin_memset(&key, 0, sizeof(key));
			__builtin_memset(&seg, 0, sizeof(seg));
			why = UNPARSED_FRAGMENT;
			res = parse_frame(data, data_end, &key, &why, &seg);
		}
	}

	switch (res) {
	case PARSE_TCP:
		break;
	case PARSE_UNPARSED:
		if (!steered_hosts(&key))
			goto pass;
		/* Possibly a steered flow's, and not something the data path can take: keep it
		 * from the frozen socket. */
		if (why == UNPARSED_FRAGMENT)
			COUNT(c, dropped_fragment);
		else if (why == UNPARSED_IPV6_EXT)
			COUNT(c, dropped_ipv6_ext);
		else
			COUNT(c, dropped_vlan_stack);
		return XDP_DROP;
	case PARSE_TOO_DEEP:
		/* Its host pair is unknown: it could be a steered flow's, so the frozen socket must
		 * not see it. */
		COUNT(c, dropped_vlan_stack);
		return XDP_DROP;
	case PARSE_MALFORMED:
		COUNT(c, malformed);
		/* Cut inside the TCP header (or an IPv6 extension chain) after the addresses were
		 * read: if they are a steered host pair it may be a steered flow's, and the frozen
		 * socket must not see it. */
		if (key.family && steered_hosts(&key)) {
			COUNT(c, dropped_malformed);
			return XDP_DROP;
		}
		goto pass;
	default:
		goto pass;
	}

	if (!bpf_map_lookup_elem(&flows, &key)) {
		/* Only segments the kernel gets set its TS.Recent: record before the flow is
		 * steered, never after. */
		if (seg.tcp)
			record_ts(ctx, &key, (__u32)((void *)seg.tcp - data), seg.l4_len);
		goto pass;
	}

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
