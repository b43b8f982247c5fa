/* RDMA Write or Read bandwidth over the datapath through libmpaxdp, in the manner of
 * perftest's ib_write_bw and ib_read_bw.
 *
 *   rdma_bw SOCKET listen  ADDR:PORT [SIZE] [--busy-poll N]              # the passive side
 *   rdma_bw SOCKET connect ADDR:PORT [SIZE] [ITERS] [--read] [--busy-poll N] [--json]
 *
 * SOCKET is the datapath's control socket (an mpa-control serve must serve it); SIZE the
 * octets of each message (default 65536); ITERS the messages (default 1000). The listener
 * registers a region of SLOTS x SIZE octets peers may write and read, advertises it in its
 * Reply (ctlproto/src/region_ad.rs), and waits for the connection's end, counting the Writes
 * placed. The connector writes into that region (or, with --read, reads from it) slot after
 * slot, every message signaled and at most DEPTH outstanding, and prints perftest's columns
 * (#bytes #iterations BW peak[Gb/sec] BW average[Gb/sec] MsgRate[Mpps]) or one JSON document.
 * It works against a second datapath or against mpa-peer listen --advertise STAG:LEN
 * [--remote-read]. --busy-poll N polls for completions instead of sleeping, offering the core
 * every N empty polls (0: never). Every completion's status is checked; every wait is
 * bounded. */
#define EXAMPLE "rdma_bw"
#include "mpx_example.h"

#define SLOTS 64
#define DEPTH 64

static const char *usage =
    "usage: rdma_bw SOCKET listen|connect ADDR:PORT [SIZE] [ITERS] [--read] [--busy-poll N] "
    "[--json]";

/* --busy-poll's N, or -1: wait asleep. */
static long long busy_polls = -1;

/* The listener: accepts one connection and counts the Writes placed until it ends. */
static int listen_side(const char *socket, const char *addr, uint64_t size) {
    struct resources r;
    resources(&r, socket, SLOTS * size, MPX_ACCESS_REMOTE_WRITE | MPX_ACCESS_REMOTE_READ,
              busy_polls);
    uint64_t listen_id = 0;
    uint16_t port = 0;
    check("listen", mpx_listen(r.ctx, r.pd, addr, &listen_id, &port));
    printf("listening on %s\n", addr);
    fflush(stdout);
    mpx_cm_event ev = next_event(r.ctx);
    if (ev.event != MPX_CM_CONNECT_REQUEST) {
        fprintf(stderr, EXAMPLE ": a connection request expected, got event %u\n", ev.event);
        return 1;
    }
    uint8_t ad[AD_LEN];
    our_ad(ad, r.stag, SLOTS * size);
    check("accept", mpx_accept(r.ctx, ev.conn_id, ad, AD_LEN));
    ev = next_event(r.ctx);
    if (ev.event != MPX_CM_ESTABLISHED) {
        fprintf(stderr, EXAMPLE ": the connection was not established (event %u)\n", ev.event);
        return 1;
    }
    uint64_t placed = 0, octets = 0;
    for (int idle = 0; idle < WAIT_MS / IDLE_MS;) {
        mpx_wc wc[64];
        int n = mpx_wait_cq(r.ctx, r.recv_cq, wc, 64, IDLE_MS);
        check("wait_cq", n);
        for (int i = 0; i < n; i++) {
            if (wc[i].kind != MPX_WC_WRITE_PLACED || wc[i].status != 0) {
                fprintf(stderr, EXAMPLE ": unexpected completion kind %u status %u\n", wc[i].kind,
                        wc[i].status);
                return 1;
            }
            placed++;
            octets += wc[i].byte_len;
        }
        if (n > 0) {
            idle = 0;
            continue;
        }
        mpx_cm_event end;
        int e = mpx_get_cm_event(r.ctx, 0, &end);
        if (e == MPX_OK && end.event == MPX_CM_DISCONNECTED) {
            printf("connection ended (%s); %llu writes placed, %llu octets\n", end.reason,
                   (unsigned long long)placed, (unsigned long long)octets);
            mpx_close(r.ctx);
            return 0;
        }
        if (e != MPX_ERR_TIMEOUT) check("get_cm_event", e);
        idle++;
    }
    fprintf(stderr, EXAMPLE ": no Write and no end within %d ms\n", WAIT_MS);
    return 1;
}

/* The connector: ITERS Writes (or Reads) of SIZE, DEPTH outstanding; the columns. */
static int connect_side(const char *socket, const char *addr, uint64_t size, uint64_t iters,
                        int read, int json) {
    struct resources r;
    resources(&r, socket, SLOTS * size, MPX_ACCESS_REMOTE_WRITE, busy_polls);
    for (uint64_t j = 0; j < SLOTS * size; j++) r.mem[j] = (uint8_t)(j * 7 + 1);
    uint8_t ad[AD_LEN];
    our_ad(ad, r.stag, SLOTS * size);
    uint64_t conn_id = 0;
    check("connect", mpx_connect(r.ctx, r.pd, addr, ad, AD_LEN, &conn_id));
    mpx_cm_event ev = next_event(r.ctx);
    if (ev.event != MPX_CM_ESTABLISHED) {
        fprintf(stderr, EXAMPLE ": connection %llu not established (event %u: %s)\n",
                (unsigned long long)conn_id, ev.event, ev.reason);
        return 1;
    }
    uint64_t flow = ev.flow_id;
    uint32_t their_stag;
    uint64_t their_to;
    peer_ad(ev.private_data, ev.private_data_len, size, &their_stag, &their_to);
    uint64_t their_slots = get_be(ev.private_data + 12, 8) / size;
    if (their_slots > SLOTS) their_slots = SLOTS;
    uint32_t opcode = read ? MPX_WR_READ : MPX_WR_WRITE;
    uint32_t want = read ? MPX_WC_READ_RESPONSE_PLACED : MPX_WC_WRITE_SENT;
    uint64_t posted = 0, done = 0;
    double peak = 0;
    struct timespec t0, t1, window;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    window = t0;
    uint64_t window_done = 0;
    while (done < iters) {
        while (posted < iters && posted - done < DEPTH) {
            uint64_t slot = posted % their_slots;
            int e = post_rdma(&r, flow, posted, opcode, MPX_SEND_SIGNALED, (posted % SLOTS) * size,
                              size, their_stag, their_to + slot * size);
            if (e == MPX_ERR_AGAIN) break;
            posted++;
        }
        mpx_wc wc[DEPTH];
        int n = mpx_wait_cq(r.ctx, r.send_cq, wc, DEPTH, WAIT_MS);
        check("wait_cq", n);
        if (n == 0) {
            fprintf(stderr, EXAMPLE ": no completion within %d ms (%llu of %llu done)\n", WAIT_MS,
                    (unsigned long long)done, (unsigned long long)iters);
            return 1;
        }
        for (int i = 0; i < n; i++) {
            if (wc[i].kind != want || wc[i].status != 0 || wc[i].wr_id != done + (uint64_t)i) {
                fprintf(stderr, EXAMPLE ": completion %llu: kind %u status %u wr_id %llu\n",
                        (unsigned long long)(done + (uint64_t)i), wc[i].kind, wc[i].status,
                        (unsigned long long)wc[i].wr_id);
                return 1;
            }
        }
        done += (uint64_t)n;
        /* The peak: the best rate over any stretch of at least DEPTH completions. */
        if (done - window_done >= DEPTH) {
            struct timespec now;
            clock_gettime(CLOCK_MONOTONIC, &now);
            double s = seconds_between(window, now);
            double gbps = s > 0 ? (double)((done - window_done) * size) * 8 / s / 1e9 : 0;
            if (gbps > peak) peak = gbps;
            window = now;
            window_done = done;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = seconds_between(t0, t1);
    double avg = (double)(iters * size) * 8 / s / 1e9;
    if (peak < avg) peak = avg;
    double mpps = (double)iters / s / 1e6;
    check("disconnect", mpx_disconnect(r.ctx, flow));
    if (json) {
        printf("{\"op\":\"%s\",\"bytes\":%llu,\"iterations\":%llu,\"bw_peak_gbps\":%.3f,"
               "\"bw_average_gbps\":%.3f,\"msg_rate_mpps\":%.4f}\n",
               read ? "read" : "write", (unsigned long long)size, (unsigned long long)iters, peak,
               avg, mpps);
    } else {
        printf(" #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n");
        printf(" %-10llu %-14llu %-18.2f %-20.2f %.6f\n", (unsigned long long)size,
               (unsigned long long)iters, peak, avg, mpps);
    }
    mpx_close(r.ctx);
    return 0;
}

int main(int argc, char **argv) {
    int json = 0, read = 0;
    int n = 0;
    char *args[8];
    for (int i = 0; i < argc && n < 8; i++) {
        if (i > 0 && strcmp(argv[i], "--json") == 0) json = 1;
        else if (i > 0 && strcmp(argv[i], "--read") == 0) read = 1;
        else if (i > 0 && strcmp(argv[i], "--busy-poll") == 0) {
            if (i + 1 == argc) {
                fprintf(stderr, EXAMPLE ": --busy-poll needs N; %s\n", usage);
                return 1;
            }
            busy_polls = busy_poll_arg(argv[++i], usage);
        }
        else args[n++] = argv[i];
    }
    if (n < 4 || n > 6) {
        fprintf(stderr, "%s\n", usage);
        return 1;
    }
    uint64_t size = n > 4 ? number(args[4], "SIZE", usage) : 65536;
    uint64_t iters = n > 5 ? number(args[5], "ITERS", usage) : 1000;
    if (strcmp(args[2], "listen") == 0) return listen_side(args[1], args[3], size);
    if (strcmp(args[2], "connect") == 0)
        return connect_side(args[1], args[3], size, iters, read, json);
    fprintf(stderr, EXAMPLE ": %s is neither listen nor connect; %s\n", args[2], usage);
    return 1;
}
