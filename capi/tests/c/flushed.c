/* Flushed completions from C: connects to ADDR through the datapath at SOCKET, posts three
 * receive buffers (wr_id 700, 701, 702), prints "ready", and waits for the peer to reset the
 * connection: each buffer must complete on the receive CQ as a Send arrived with status 5
 * (flushed) and its wr_id, in order, and the connection's end must come as
 * MPX_CM_DISCONNECTED. Usage: flushed SOCKET ADDR:PORT. Exits 0 when all hold. */
#include <mpaxdp.h>
#include <stdio.h>
#include <string.h>

static int fail(const char *what, int code) {
    printf("FAIL %s: %s (%s)\n", what, mpx_error_name(code), mpx_last_error());
    return 1;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: flushed SOCKET ADDR:PORT\n");
        return 2;
    }
    mpx_context *c = NULL;
    uint32_t pd, stag, scq, rcq;
    uint64_t conn;
    int e;
    if ((e = mpx_open(argv[1], 5000, &c)) != MPX_OK) return fail("open", e);
    if ((e = mpx_alloc_pd(c, &pd)) != MPX_OK) return fail("alloc_pd", e);
    if ((e = mpx_create_region(c, pd, 65536, MPX_ACCESS_REMOTE_WRITE, &stag)) != MPX_OK)
        return fail("create_region", e);
    if ((e = mpx_subscribe(c, pd)) != MPX_OK) return fail("subscribe", e);
    if ((e = mpx_create_cq(c, pd, 64, &scq)) != MPX_OK) return fail("create_cq", e);
    if ((e = mpx_create_cq(c, pd, 64, &rcq)) != MPX_OK) return fail("create_cq", e);
    if ((e = mpx_set_domain_cqs(c, scq, rcq)) != MPX_OK) return fail("set_domain_cqs", e);
    if ((e = mpx_connect(c, pd, argv[2], NULL, 0, &conn)) != MPX_OK) return fail("connect", e);
    mpx_cm_event ev;
    if ((e = mpx_get_cm_event(c, 10000, &ev)) != MPX_OK) return fail("get_cm_event", e);
    if (ev.event != MPX_CM_ESTABLISHED) {
        printf("FAIL not established: event %u (%s)\n", ev.event, ev.reason);
        return 1;
    }
    if ((e = mpx_post_recv(c, ev.flow_id, stag, 0, 1024, 3, 700)) != MPX_OK)
        return fail("post_recv", e);
    printf("ready\n");
    fflush(stdout);
    mpx_wc wc[8];
    int got = 0;
    while (got < 3) {
        int n = mpx_wait_cq(c, rcq, wc + got, (uint32_t)(8 - got), 10000);
        if (n < 0) return fail("wait_cq", n);
        if (n == 0) {
            printf("FAIL %d of 3 flushed completions within 10 s\n", got);
            return 1;
        }
        got += n;
    }
    for (int i = 0; i < got; i++) {
        if (wc[i].kind != MPX_WC_SEND_ARRIVED || wc[i].status != 5 ||
            wc[i].wr_id != 700 + (uint64_t)i || wc[i].flow_id != ev.flow_id) {
            printf("FAIL completion %d: kind %u status %u wr_id %llu\n", i, wc[i].kind,
                   wc[i].status, (unsigned long long)wc[i].wr_id);
            return 1;
        }
    }
    mpx_cm_event end;
    if ((e = mpx_get_cm_event(c, 10000, &end)) != MPX_OK) return fail("get_cm_event", e);
    if (end.event != MPX_CM_DISCONNECTED || end.flow_id != ev.flow_id) {
        printf("FAIL the end: event %u\n", end.event);
        return 1;
    }
    if (mpx_poll_cq(c, scq, wc, 8) != 0) {
        printf("FAIL the send CQ has completions\n");
        return 1;
    }
    printf("flushed 3, then disconnected (%s)\n", end.reason);
    mpx_close(c);
    return 0;
}
