/* An RDMA Write ping-pong over the datapath through libmpaxdp, in the manner of rdma-core's
 * rc_pingpong and perftest's ib_write_lat: the C twin of app/examples/write_pingpong.rs, and
 * speaking the same convention, so either side works against the other, against a second
 * datapath, or against mpa-peer (listen --echo, connect --op pingpong). docs/c-library.md
 * walks through it.
 *
 *   write_pingpong SOCKET listen  ADDR:PORT [SIZE] [ITERS] [--busy-poll N]   # the echo side
 *   write_pingpong SOCKET connect ADDR:PORT [SIZE] [ITERS] [--busy-poll N] [--json]
 *                  [--samples FILE]                                         # the measuring side
 *
 * SOCKET is the datapath's control socket (an mpa-control serve must serve it); SIZE the
 * payload octets of each Write (default 64); ITERS the round trips (default 1000). Each side
 * registers a region of 2 x SIZE octets peers may write (the first half receives, the second
 * is the connector's send buffer) and advertises it in its private data (32 octets, "MPXR",
 * ctlproto/src/region_ad.rs). Completions are waited for asleep on the domain's descriptor;
 * --busy-poll N polls for them instead, as perftest does, offering the core to other threads
 * every N empty polls (0: never; mpx_set_busy_poll). Every echo is checked octet for octet;
 * the connector prints perftest's latency columns (half the round trip, microseconds), or
 * with --json one JSON document of the same values; --samples FILE also writes every round
 * trip, nanoseconds, one per line in the order measured (mpa-bench lat --pingpong --modes c-api reads them). Every
 * wait is bounded; a failure is printed on stderr and the exit status is 1. */
#define EXAMPLE "write_pingpong"
#include "mpx_example.h"

static const char *usage =
    "usage: write_pingpong SOCKET listen|connect ADDR:PORT [SIZE] [ITERS] [--busy-poll N] "
    "[--json] [--samples FILE]";

/* --busy-poll's N, or -1: wait asleep. */
static long long busy_polls = -1;


/* The listener: accepts one connection and echoes every Write until it ends. */
static int listen_side(const char *socket, const char *addr, uint64_t size) {
    struct resources r;
    resources(&r, socket, 2 * size, MPX_ACCESS_REMOTE_WRITE, busy_polls);
    uint64_t listen_id = 0;
    uint16_t port = 0;
    /* rdma_conn_param: zeroed is revision 2, CRCs, IRD and ORD 8 (mpx_listen's); a Write
     * ping-pong needs no Reads, so it offers none. */
    mpx_conn_param param;
    memset(&param, 0, sizeof param);
    param.ird = 1;
    param.ord = 1;
    check("listen", mpx_listen_with(r.ctx, r.pd, addr, &param, &listen_id, &port));
    printf("listening on %s\n", addr);
    fflush(stdout);
    mpx_cm_event ev = next_event(r.ctx);
    if (ev.event != MPX_CM_CONNECT_REQUEST) {
        fprintf(stderr, "write_pingpong: a connection request expected, got event %u\n", ev.event);
        return 1;
    }
    uint32_t their_stag;
    uint64_t their_to;
    peer_ad(ev.private_data, ev.private_data_len, size, &their_stag, &their_to);
    uint8_t ad[AD_LEN];
    our_ad(ad, r.stag, size);
    check("accept", mpx_accept(r.ctx, ev.conn_id, ad, AD_LEN));
    ev = next_event(r.ctx);
    if (ev.event != MPX_CM_ESTABLISHED) {
        fprintf(stderr, "write_pingpong: the connection was not established (event %u)\n", ev.event);
        return 1;
    }
    uint64_t flow = ev.flow_id;
    if (ev.has_ird_ord)
        printf("connected to %s (flow %llu; IRD %u, ORD %u)\n", ev.peer,
               (unsigned long long)flow, ev.ird, ev.ord);
    else
        printf("connected to %s (flow %llu)\n", ev.peer, (unsigned long long)flow);
    uint64_t echoed = 0;
    struct timespec heard;
    clock_gettime(CLOCK_MONOTONIC, &heard);
    for (;;) {
        mpx_wc wc[16];
        int n = mpx_wait_cq(r.ctx, r.recv_cq, wc, 16, IDLE_MS);
        check("wait_cq", n);
        no_failures(&r);
        if (n == 0) {
            /* No ping for a moment: has the connection ended? */
            mpx_cm_event end;
            int e = mpx_get_cm_event(r.ctx, 0, &end);
            if (e == MPX_OK && end.event == MPX_CM_DISCONNECTED) {
                printf("connection ended (%s); %llu echoes\n", end.reason,
                       (unsigned long long)echoed);
                mpx_close(r.ctx);
                return 0;
            }
            if (e != MPX_ERR_TIMEOUT) check("get_cm_event", e);
            struct timespec now;
            clock_gettime(CLOCK_MONOTONIC, &now);
            if (now.tv_sec - heard.tv_sec > WAIT_MS / 1000) {
                fprintf(stderr, "write_pingpong: no ping and no end within %d ms\n", WAIT_MS);
                return 1;
            }
            continue;
        }
        clock_gettime(CLOCK_MONOTONIC, &heard);
        for (int i = 0; i < n; i++) {
            if (wc[i].kind != MPX_WC_WRITE_PLACED || wc[i].flow_id != flow || wc[i].status != 0) {
                fprintf(stderr, "write_pingpong: unexpected completion kind %u status %u\n",
                        wc[i].kind, wc[i].status);
                return 1;
            }
            /* The echo: the same octets, at the same offset of the peer's region. */
            post_write(&r, flow, echoed, wc[i].offset, wc[i].byte_len, their_stag,
                       their_to + wc[i].offset);
            echoed++;
        }
    }
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* perftest's ib_write_lat columns (or one JSON document): half the round trip, microseconds. */
static void print_latency(uint64_t size, double *half_us, uint64_t n, int json) {
    qsort(half_us, n, sizeof *half_us, by_value);
    double sum = 0, var = 0;
    for (uint64_t i = 0; i < n; i++) sum += half_us[i];
    double avg = sum / (double)n;
    for (uint64_t i = 0; i < n; i++) var += (half_us[i] - avg) * (half_us[i] - avg);
#define PCT(p) half_us[(uint64_t)fmin((double)n, fmax(1.0, ceil((double)n * (p)))) - 1]
    if (json) {
        printf("{\"bytes\":%llu,\"iterations\":%llu,\"t_min_usec\":%.3f,\"t_max_usec\":%.3f,"
               "\"t_typical_usec\":%.3f,\"t_avg_usec\":%.3f,\"t_stdev_usec\":%.3f,"
               "\"p99_usec\":%.3f,\"p99_9_usec\":%.3f}\n",
               (unsigned long long)size, (unsigned long long)n, half_us[0], half_us[n - 1],
               PCT(0.5), avg, sqrt(var / (double)n), PCT(0.99), PCT(0.999));
        return;
    }
    printf(" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    "
           "t_stdev[usec]   99%% percentile[usec]   99.9%% percentile[usec]\n");
    printf(" %-6llu %-10llu %-14.2f %-14.2f %-16.2f %-14.2f %-15.2f %-22.2f %.2f\n",
           (unsigned long long)size, (unsigned long long)n, half_us[0], half_us[n - 1], PCT(0.5),
           avg, sqrt(var / (double)n), PCT(0.99), PCT(0.999));
#undef PCT
}

/* Every round trip, nanoseconds, one per line. */
static void write_samples(const char *path, const uint64_t *rtt_ns, uint64_t n) {
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        fprintf(stderr, "write_pingpong: %s: %s\n", path, strerror(errno));
        exit(1);
    }
    for (uint64_t i = 0; i < n; i++) fprintf(f, "%llu\n", (unsigned long long)rtt_ns[i]);
    if (fclose(f) != 0) {
        fprintf(stderr, "write_pingpong: %s: %s\n", path, strerror(errno));
        exit(1);
    }
}

/* The connector: connects, pings `iters` times, checks every echo, prints the latencies. */
static int connect_side(const char *socket, const char *addr, uint64_t size, uint64_t iters,
                        int json, const char *samples) {
    struct resources r;
    resources(&r, socket, 2 * size, MPX_ACCESS_REMOTE_WRITE, busy_polls);
    uint8_t ad[AD_LEN];
    our_ad(ad, r.stag, size);
    uint64_t conn_id = 0;
    mpx_conn_param param;
    memset(&param, 0, sizeof param);
    param.private_data = ad;
    param.private_data_len = AD_LEN;
    param.ird = 1;
    param.ord = 1;
    param.timeout_ms = WAIT_MS;
    check("connect", mpx_connect_with(r.ctx, r.pd, addr, &param, &conn_id));
    mpx_cm_event ev = next_event(r.ctx);
    if (ev.event == MPX_CM_REJECTED) {
        fprintf(stderr, "write_pingpong: connection %llu rejected: %.*s\n",
                (unsigned long long)conn_id, (int)ev.private_data_len, ev.private_data);
        return 1;
    }
    if (ev.event != MPX_CM_ESTABLISHED) {
        fprintf(stderr, "write_pingpong: connection %llu not established (event %u: %s)\n",
                (unsigned long long)conn_id, ev.event, ev.reason);
        return 1;
    }
    uint64_t flow = ev.flow_id;
    uint32_t their_stag;
    uint64_t their_to;
    peer_ad(ev.private_data, ev.private_data_len, size, &their_stag, &their_to);
    double *half_us = calloc(iters, sizeof *half_us);
    uint64_t *rtt_ns = calloc(iters, sizeof *rtt_ns);
    if (half_us == NULL || rtt_ns == NULL) {
        fprintf(stderr, "write_pingpong: no memory for %llu samples\n", (unsigned long long)iters);
        return 1;
    }
    /* The ping: a pattern written once, its first (up to) 8 octets the iteration's number, so
     * that an echo of an earlier ping cannot pass the check and the sender does not read a
     * whole freshly written message from this core's cache every round trip. */
    uint8_t *ping = r.mem + size, *echo = r.mem;
    for (uint64_t j = 0; j < size; j++) ping[j] = (uint8_t)(j * 13 + 1);
    for (uint64_t i = 0; i < iters; i++) {
        for (uint64_t j = 0; j < size && j < 8; j++) ping[j] = (uint8_t)(i >> (8 * j));
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        post_write(&r, flow, i, size, size, their_stag, their_to);
        mpx_wc wc;
        int n = mpx_wait_cq(r.ctx, r.recv_cq, &wc, 1, WAIT_MS);
        check("wait_cq", n);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if (n == 0 || wc.kind != MPX_WC_WRITE_PLACED || wc.flow_id != flow) {
            fprintf(stderr, "write_pingpong: no echo %llu within %d ms\n", (unsigned long long)i,
                    WAIT_MS);
            return 1;
        }
        no_failures(&r);
        if (memcmp(echo, ping, size) != 0) {
            fprintf(stderr, "write_pingpong: echo %llu differs from its ping\n",
                    (unsigned long long)i);
            return 1;
        }
        rtt_ns[i] = (uint64_t)(t1.tv_sec - t0.tv_sec) * 1000000000u + (uint64_t)t1.tv_nsec -
                    (uint64_t)t0.tv_nsec;
        half_us[i] = (double)rtt_ns[i] / 2000.0;
    }
    /* rdma_disconnect: what is posted goes out first, then the FIN. */
    check("disconnect", mpx_disconnect(r.ctx, flow));
    if (samples != NULL) write_samples(samples, rtt_ns, iters);
    print_latency(size, half_us, iters, json);
    free(half_us);
    free(rtt_ns);
    mpx_close(r.ctx);
    return 0;
}


int main(int argc, char **argv) {
    /* The options, anywhere after SOCKET; the rest are the positional arguments. */
    int json = 0;
    const char *samples = NULL;
    char *pos[5];
    int npos = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if (strcmp(argv[i], "--samples") == 0 && i + 1 < argc) {
            samples = argv[++i];
        } else if (strcmp(argv[i], "--busy-poll") == 0 && i + 1 < argc) {
            busy_polls = busy_poll_arg(argv[++i], usage);
        } else if (strncmp(argv[i], "--", 2) == 0 || npos == 5) {
            fprintf(stderr, "write_pingpong: unexpected argument %s; %s\n", argv[i], usage);
            return 1;
        } else {
            pos[npos++] = argv[i];
        }
    }
    if (npos < 3) {
        fprintf(stderr, "%s\n", usage);
        return 1;
    }
    uint64_t size = npos > 3 ? number(pos[3], "SIZE", usage) : 64;
    uint64_t iters = npos > 4 ? number(pos[4], "ITERS", usage) : 1000;
    if (strcmp(pos[1], "listen") == 0) return listen_side(pos[0], pos[2], size);
    if (strcmp(pos[1], "connect") == 0)
        return connect_side(pos[0], pos[2], size, iters, json, samples);
    fprintf(stderr, "write_pingpong: %s is neither listen nor connect; %s\n", pos[1], usage);
    return 1;
}
