/* What the C examples share: the context and its domain, region and CQs set up as the verbs
 * examples do, the region advertisement of ctlproto/src/region_ad.rs ("MPXR", 32 octets) in
 * the connection's private data, one RDMA work request, and bounded waits. Each example sets
 * EXAMPLE (its name, for messages) before including it. */
#ifndef MPX_EXAMPLE_H
#define MPX_EXAMPLE_H

#include <mpaxdp.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WAIT_MS 10000
#define IDLE_MS 50
#define AD_LEN 32


/* Prints why and exits. */
static inline void die(const char *what, int code) {
    fprintf(stderr, EXAMPLE ": %s: %s (%s)\n", what, mpx_last_error(), mpx_error_name(code));
    exit(1);
}

static inline void check(const char *what, int code) {
    if (code < 0) die(what, code);
}

static inline void put_be(uint8_t *p, uint64_t v, int n) {
    for (int i = n - 1; i >= 0; i--, v >>= 8) p[i] = (uint8_t)v;
}

static inline uint64_t get_be(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v = v << 8 | p[i];
    return v;
}

/* The advertisement of our receiving half (`size` octets at TO 0 of `stag`): Writes only. */
static inline void our_ad(uint8_t ad[AD_LEN], uint32_t stag, uint64_t size) {
    memset(ad, 0, AD_LEN);
    memcpy(ad, "MPXR", 4);
    ad[4] = 1;    /* version */
    ad[5] = 0x01; /* W: RDMA Writes accepted */
    put_be(ad + 8, stag, 4);
    put_be(ad + 12, size, 8);
}

/* The peer's region from its private data: its STag and base TO, or an exit. */
static inline void peer_ad(const uint8_t *pd, uint32_t len, uint64_t size, uint32_t *stag, uint64_t *to) {
    if (len < AD_LEN || memcmp(pd, "MPXR", 4) != 0 || pd[4] != 1) {
        fprintf(stderr, EXAMPLE ": the peer's private data carries no region advertisement\n");
        exit(1);
    }
    if (!(pd[5] & 0x01) || get_be(pd + 12, 8) < size) {
        fprintf(stderr, EXAMPLE ": the peer's region does not take Writes of %llu octets\n",
                (unsigned long long)size);
        exit(1);
    }
    *stag = (uint32_t)get_be(pd + 8, 4);
    *to = get_be(pd + 20, 8);
}

struct resources {
    mpx_context *ctx;
    uint32_t pd, stag, send_cq, recv_cq;
    uint8_t *mem;
};

/* The context (ibv_open_device), domain (ibv_alloc_pd), region (ibv_reg_mr), completion
 * channel and CQs (ibv_create_cq): every connection of the domain completes its own Writes on
 * the send CQ and the peer's on the receive CQ. With `busy_polls` >= 0 (--busy-poll N),
 * completions are polled for instead of waited for asleep on the domain's descriptor, as
 * perftest does (mpx_set_busy_poll). */
static inline void resources(struct resources *r, const char *socket, uint64_t region_len,
                             uint32_t access, long long busy_polls) {
    check("open", mpx_open(socket, WAIT_MS, &r->ctx));
    if (busy_polls >= 0)
        check("set_busy_poll", mpx_set_busy_poll(r->ctx, 1, (uint32_t)busy_polls));
    check("alloc_pd", mpx_alloc_pd(r->ctx, &r->pd));
    check("create_region",
          mpx_create_region(r->ctx, r->pd, region_len, access, &r->stag));
    void *addr = NULL;
    uint64_t len = 0;
    check("region_addr", mpx_region_addr(r->ctx, r->stag, &addr, &len));
    r->mem = addr;
    check("subscribe", mpx_subscribe(r->ctx, r->pd));
    check("create_cq", mpx_create_cq(r->ctx, r->pd, 4096, &r->send_cq));
    check("create_cq", mpx_create_cq(r->ctx, r->pd, 4096, &r->recv_cq));
    check("set_domain_cqs", mpx_set_domain_cqs(r->ctx, r->send_cq, r->recv_cq));
}

/* One RDMA Write or Read (`opcode`) of `len` octets between `offset` of our region and `to`
 * of the peer's `stag`, with `flags`, through the shared-memory post queue: 0 when posted,
 * MPX_ERR_AGAIN when the queue is full. */
static inline int post_rdma(struct resources *r, uint64_t flow, uint64_t wr_id, uint32_t opcode,
                            uint32_t flags, uint64_t offset, uint64_t len, uint32_t stag,
                            uint64_t to) {
    mpx_send_wr wr;
    memset(&wr, 0, sizeof wr);
    wr.wr_id = wr_id;
    wr.flow_id = flow;
    wr.opcode = opcode;
    wr.flags = flags;
    wr.remote_stag = stag;
    wr.remote_offset = to;
    wr.count = 1;
    wr.num_sge = 1;
    wr.sg_list[0].stag = r->stag;
    wr.sg_list[0].offset = offset;
    wr.sg_list[0].length = len;
    int e = mpx_post_send(r->ctx, &wr);
    if (e != MPX_ERR_AGAIN) check("post_send", e);
    return e;
}

/* One signaled Write, as perftest's ib_write_lat posts them (its completion comes on the send
 * CQ; no_failures takes it); the post queue has room. */
static inline void post_write(struct resources *r, uint64_t flow, uint64_t wr_id, uint64_t offset,
                              uint64_t len, uint32_t stag, uint64_t to) {
    check("post_send", post_rdma(r, flow, wr_id, MPX_WR_WRITE, MPX_SEND_SIGNALED, offset, len, stag, to));
}

/* Takes what the send CQ holds; a failed request of ours ends the program. */
static inline void no_failures(struct resources *r) {
    mpx_wc wc[16];
    int n = mpx_poll_cq(r->ctx, r->send_cq, wc, 16);
    check("poll_cq", n);
    for (int i = 0; i < n; i++) {
        if (wc[i].status != 0) {
            fprintf(stderr, EXAMPLE ": work request %llu failed with status %u\n",
                    (unsigned long long)wc[i].wr_id, wc[i].status);
            exit(1);
        }
    }
}

static inline mpx_cm_event next_event(mpx_context *ctx) {
    mpx_cm_event ev;
    check("get_cm_event", mpx_get_cm_event(ctx, WAIT_MS, &ev));
    return ev;
}

static inline uint64_t number(const char *s, const char *name, const char *usage) {
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s || *end != '\0' || v == 0) {
        fprintf(stderr, EXAMPLE ": %s %s is not a positive number; %s\n", name, s, usage);
        exit(1);
    }
    return v;
}

/* --busy-poll N's N: empty polls between two offers of the core (0: never); a bad one ends
 * the program with the usage. */
static inline long long busy_poll_arg(const char *n, const char *usage) {
    char *end = NULL;
    unsigned long long v = strtoull(n, &end, 10);
    if (end == n || *end != '\0' || *n == '-' || v > UINT32_MAX) {
        fprintf(stderr, EXAMPLE ": --busy-poll %s is not a number of polls; %s\n", n, usage);
        exit(1);
    }
    return (long long)v;
}

static inline double seconds_between(struct timespec a, struct timespec b) {
    return (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
}

#endif
