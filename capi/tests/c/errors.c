/* Every error path of libmpaxdp from C, against a live datapath: each call that must fail
 * returns its code and leaves a message; a panic inside the library is an error, not an
 * abort. Usage: errors SOCKET. Prints one line per check; exits 0 when all hold. */
#define _GNU_SOURCE
#include <mpaxdp.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

static int failures;

/* A count (of completions) that must be `want`. */
static void expect_count(const char *what, int got, int want) {
    if (got != want) {
        printf("FAIL %s: %d (%s: %s), want %d\n", what, got, mpx_error_name(got),
               got < 0 ? mpx_last_error() : "", want);
        failures++;
    } else {
        printf("ok %s: %d\n", what, got);
    }
}

static void expect(const char *what, int got, int want) {
    const char *msg = mpx_last_error();
    if (got != want) {
        printf("FAIL %s: %s (%d), want %s: %s\n", what, mpx_error_name(got), got,
               mpx_error_name(want), msg);
        failures++;
    } else if (want != MPX_OK && (msg == NULL || msg[0] == '\0')) {
        printf("FAIL %s: %s without a message\n", what, mpx_error_name(got));
        failures++;
    } else {
        printf("ok %s: %s%s%s\n", what, mpx_error_name(got), want != MPX_OK ? ": " : "",
               want != MPX_OK ? msg : "");
    }
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: errors SOCKET\n");
        return 2;
    }
    mpx_context *a = NULL, *b = NULL;
    uint32_t pd = 0, other = 0, stag = 0, cq = 0;
    mpx_wc wc[4];

    /* Bad handles and arguments. */
    expect("null context", mpx_alloc_pd(NULL, &pd), MPX_ERR_INVALID);
    expect("null socket path", mpx_open(NULL, 1000, &a), MPX_ERR_INVALID);
    expect("no datapath there", mpx_open("/nonexistent/mpa.sock", 1000, &a), MPX_ERR_IO);
    expect("open", mpx_open(argv[1], 5000, &a), MPX_OK);
    expect("open another", mpx_open(argv[1], 5000, &b), MPX_OK);
    expect("alloc_pd", mpx_alloc_pd(a, &pd), MPX_OK);
    expect("null out pointer", mpx_alloc_pd(a, NULL), MPX_ERR_INVALID);
    expect("unknown access flags", mpx_create_region(a, pd, 4096, 0x80, &stag), MPX_ERR_INVALID);
    expect("create_region", mpx_create_region(a, pd, 4096, MPX_ACCESS_REMOTE_WRITE, &stag), MPX_OK);
    void *addr = NULL;
    uint64_t len = 0;
    expect("region_addr", mpx_region_addr(a, stag, &addr, &len), MPX_OK);
    if (addr == NULL || len != 4096) {
        printf("FAIL region_addr: %p, %llu octets\n", addr, (unsigned long long)len);
        failures++;
    } else {
        memset(addr, 0x5a, len); /* the region is ours to write */
    }
    expect("a region this context does not have", mpx_region_addr(a, stag + 1, &addr, &len),
           MPX_ERR_INVALID);
    /* The application's own memory: a memfd is registered, a pipe is not. */
    int fds[2];
    if (pipe(fds) != 0) return 2;
    uint32_t own = 0;
    expect("register a pipe", mpx_register_region(a, fds[0], 4096, pd, 0, &own), MPX_ERR_REFUSED);
    expect("register a negative descriptor", mpx_register_region(a, -1, 4096, pd, 0, &own),
           MPX_ERR_INVALID);
    int mfd = memfd_create("mpx-errors", MFD_ALLOW_SEALING);
    if (mfd < 0 || ftruncate(mfd, 8192) != 0) return 2;
    expect("register a memfd", mpx_register_region(a, mfd, 8192, pd, MPX_ACCESS_REMOTE_WRITE, &own),
           MPX_OK);
    expect("register it into a foreign domain", mpx_register_region(b, mfd, 8192, pd, 0, &own),
           MPX_ERR_FORBIDDEN);
    close(fds[0]);
    close(fds[1]);
    close(mfd);
    expect("CQ before subscribing", mpx_create_cq(a, pd, 16, &cq), MPX_ERR_INVALID);
    expect("subscribe", mpx_subscribe(a, pd), MPX_OK);
    expect("CQ of no records", mpx_create_cq(a, pd, 0, &cq), MPX_ERR_INVALID);
    expect("create_cq", mpx_create_cq(a, pd, 16, &cq), MPX_OK);
    expect("the domain's CQs", mpx_set_domain_cqs(a, cq, cq), MPX_OK);
    expect("destroy a CQ in use", mpx_destroy_cq(a, cq), MPX_ERR_INVALID);
    expect("poll an unknown CQ", mpx_poll_cq(a, cq + 100, wc, 4), MPX_ERR_INVALID);
    expect_count("poll: nothing yet", mpx_poll_cq(a, cq, wc, 4), 0);
    expect("a malformed address", mpx_listen(a, pd, "not an address", NULL, NULL),
           MPX_ERR_INVALID);

    /* Connection parameters (rdma_conn_param): each bad one refused before anything starts,
     * by the library (MPX_ERR_INVALID) or by the datapath's checks (MPX_ERR_REFUSED). */
    mpx_conn_param cp;
    memset(&cp, 0, sizeof cp);
    uint64_t setup = 0, listener = 0;
    uint16_t port = 0;
    static uint8_t too_much[MPX_MAX_PRIVATE_DATA + 1];
    expect("connect_with no parameters", mpx_connect_with(a, pd, "127.0.0.1:9", NULL, &setup),
           MPX_ERR_INVALID);
    cp.flags = 0x100;
    expect("unknown connection flags", mpx_connect_with(a, pd, "127.0.0.1:9", &cp, &setup),
           MPX_ERR_INVALID);
    cp.flags = MPX_CONN_REVISION_1 | MPX_CONN_P2P;
    expect("peer-to-peer in revision 1", mpx_connect_with(a, pd, "127.0.0.1:9", &cp, &setup),
           MPX_ERR_INVALID);
    cp.flags = 0;
    cp.ird = 33;
    expect("an IRD beyond the datapath's", mpx_connect_with(a, pd, "127.0.0.1:9", &cp, &setup),
           MPX_ERR_REFUSED);
    cp.ird = 0;
    cp.private_data = too_much;
    cp.private_data_len = sizeof too_much;
    expect("too much private data", mpx_connect_with(a, pd, "127.0.0.1:9", &cp, &setup),
           MPX_ERR_REFUSED);
    cp.private_data = NULL;
    cp.private_data_len = 4;
    expect("private data null with a length", mpx_connect_with(a, pd, "127.0.0.1:9", &cp, &setup),
           MPX_ERR_INVALID);
    cp.private_data = too_much;
    expect("a listener's own private data",
           mpx_listen_with(a, pd, "127.0.0.1:0", &cp, &listener, &port), MPX_ERR_INVALID);
    cp.private_data = NULL;
    cp.private_data_len = 0;
    cp.timeout_ms = 100;
    expect("a listener's timeout", mpx_listen_with(a, pd, "127.0.0.1:0", &cp, &listener, &port),
           MPX_ERR_INVALID);
    cp.timeout_ms = 0;
    cp.flags = MPX_CONN_P2P;
    expect("a peer-to-peer listener", mpx_listen_with(a, pd, "127.0.0.1:0", &cp, &listener, &port),
           MPX_ERR_INVALID);
    cp.flags = 0;
    cp.ord = 0x4000;
    expect("an ORD beyond 14 bits", mpx_listen_with(a, pd, "127.0.0.1:0", &cp, &listener, &port),
           MPX_ERR_REFUSED);
    cp.ord = 0;
    cp.backlog = 4;
    expect("a connector's backlog", mpx_connect_with(a, pd, "127.0.0.1:9", &cp, &setup),
           MPX_ERR_INVALID);
    cp.backlog = 100000;
    expect("a backlog beyond the datapath's", mpx_listen_with(a, pd, "127.0.0.1:0", &cp, &listener,
           &port), MPX_ERR_REFUSED);
    cp.backlog = 0;

    /* How waits wait. */
    expect("busy polling neither on nor off", mpx_set_busy_poll(a, 2, 0), MPX_ERR_INVALID);
    expect("busy polling on", mpx_set_busy_poll(a, 1, MPX_DEFAULT_YIELD_EVERY), MPX_OK);
    expect_count("wait_cq polling: nothing", mpx_wait_cq(a, cq, wc, 4, 20), 0);
    expect("busy polling off", mpx_set_busy_poll(a, 0, 0), MPX_OK);

    /* Another context's objects. */
    expect("a foreign domain's region", mpx_create_region(b, pd, 4096, 0, &other), MPX_ERR_FORBIDDEN);
    expect("a foreign domain's subscription", mpx_subscribe(b, pd), MPX_ERR_FORBIDDEN);
    expect("a foreign domain freed", mpx_dealloc_pd(b, pd), MPX_ERR_FORBIDDEN);
    expect("a foreign region's address", mpx_region_addr(b, stag, &addr, &len), MPX_ERR_INVALID);
    expect("buffers into a foreign domain", mpx_post_srq_recv(b, pd, stag, 0, 64, 1, 0),
           MPX_ERR_FORBIDDEN);

    /* Connections that do not exist, and work requests that make no sense. */
    expect("buffers for no connection", mpx_post_recv(a, 999999, stag, 0, 64, 1, 0),
           MPX_ERR_NO_CONNECTION);
    expect("disconnect no connection", mpx_disconnect(a, 999999), MPX_ERR_NO_CONNECTION);
    mpx_send_wr wr;
    memset(&wr, 0, sizeof wr);
    wr.flow_id = 999999;
    wr.opcode = MPX_WR_WRITE;
    wr.flags = MPX_SEND_SIGNALED;
    wr.count = 1;
    wr.num_sge = 0;
    expect("no scatter-gather entry", mpx_post_send(a, &wr), MPX_ERR_INVALID);
    wr.num_sge = 5;
    expect("five entries", mpx_post_send(a, &wr), MPX_ERR_INVALID);
    wr.num_sge = 1;
    wr.sg_list[0].stag = stag;
    wr.sg_list[0].length = 64;
    wr.opcode = 9;
    expect("an unknown opcode", mpx_post_send(a, &wr), MPX_ERR_INVALID);
    wr.opcode = MPX_WR_WRITE;
    wr.flags = MPX_SEND_SOLICITED;
    expect("a solicited Write", mpx_post_send(a, &wr), MPX_ERR_INVALID);
    wr.flags = MPX_SEND_SIGNALED;
    wr.wr_id = 77;
    expect("a Write on no connection: posted, refused by a completion", mpx_post_send(a, &wr),
           MPX_OK);
    int n = mpx_wait_cq(a, cq, wc, 4, 5000);
    expect_count("the refusal's completion", n, 1);
    if (n == 1 && (wc[0].kind != MPX_WC_POST_REFUSED || wc[0].status != 5 || wc[0].wr_id != 77)) {
        printf("FAIL the refusal: kind %u status %u wr_id %llu (want %d, 5 flushed, 77)\n",
               wc[0].kind, wc[0].status, (unsigned long long)wc[0].wr_id, MPX_WC_POST_REFUSED);
        failures++;
    }

    /* A panic inside the library. */
    setenv("MPAXDP_FAULT", "panic", 1);
    expect("a panic inside", mpx_alloc_pd(a, &pd), MPX_ERR_INTERNAL);
    unsetenv("MPAXDP_FAULT");
    expect("the context after the panic", mpx_alloc_pd(a, &other), MPX_OK);

    expect("close", mpx_close(b), MPX_OK);
    expect("close a null context", mpx_close(NULL), MPX_OK);
    expect("close", mpx_close(a), MPX_OK);
    printf("%s: %d failures\n", failures ? "FAILED" : "passed", failures);
    return failures ? 1 : 0;
}
