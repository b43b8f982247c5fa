/* libmpaxdp: the C interface of mpa-xdp (docs/c-library.md).
 * Generated from capi/src by cbindgen; do not edit: `make header` writes it again.
 *
 * Every function returns MPX_OK (0) or a negative error code; mpx_last_error() gives the
 * message of the calling thread's last failure. A panic inside the library is caught and
 * returned as MPX_ERR_INTERNAL; nothing unwinds into C.
 *
 * Thread safety: an mpx_context is one connection to the datapath and is not thread-safe:
 * use it from one thread at a time (lock it yourself, or open one context per thread).
 * Region memory (mpx_region_addr) may be read and written from any thread; the datapath
 * reads and writes it too (see docs/consumer.md). */

#ifndef MPAXDP_H
#define MPAXDP_H

#include <stdint.h>
#include <stddef.h>

// Private data of an MPA Request or Reply at most (RFC 5044's 512, less revision 2's IRD
// and ORD).
#define MPX_MAX_PRIVATE_DATA 512

// Octets of an event's `reason` (NUL included).
#define MPX_REASON_LEN 256

// Octets of an event's address strings (NUL included).
#define MPX_ADDR_LEN 64

// A connection request at a listener: accept or reject `conn_id`.
#define MPX_CM_CONNECT_REQUEST 1

// The connection is established: post on `flow_id`.
#define MPX_CM_ESTABLISHED 2

// The peer rejected our request (its reason in the private data).
#define MPX_CM_REJECTED 3

// No TCP connection could be made.
#define MPX_CM_UNREACHABLE 4

// The setup failed after TCP connected (an MPA error, the peer closed, a timeout).
#define MPX_CM_CONNECT_ERROR 5

// A listener stopped without being asked.
#define MPX_CM_LISTEN_ENDED 6

// An established connection ended (closed, reset, a Terminate either way, an MPA error).
#define MPX_CM_DISCONNECTED 7

// `mpx_conn_param::flags`: ask the peer for markers toward us (M=1).
#define MPX_CONN_MARKERS 1

// `mpx_conn_param::flags`: do not ask for CRCs (C=0); CRCs are still used when the peer asks.
#define MPX_CONN_NO_CRC 2

// `mpx_conn_param::flags`: MPA revision 1 (RFC 5044): a connector's Request is revision 1,
// a listener accepts revision 1 only; no IRD/ORD exchange.
#define MPX_CONN_REVISION_1 4

// `mpx_conn_param::flags`, connect only: revision 2's peer-to-peer model (the connector
// sends an RTR indication first).
#define MPX_CONN_P2P 8

// Peers may write the region (RDMA Write).
#define MPX_ACCESS_REMOTE_WRITE 1

// Peers may read the region (RDMA Read).
#define MPX_ACCESS_REMOTE_READ 2

// A Write of the peer's was placed (no work request of ours: `wr_id` 0).
#define MPX_WC_WRITE_PLACED 0

// A Read of ours was answered and placed.
#define MPX_WC_READ_RESPONSE_PLACED 1

// A Send arrived in a receive buffer (or the buffer was flushed).
#define MPX_WC_SEND_ARRIVED 2

// A Write of ours was acknowledged.
#define MPX_WC_WRITE_SENT 3

// A Send of ours was acknowledged.
#define MPX_WC_SEND_SENT 4

// A post through shared memory was refused (`status` says why).
#define MPX_WC_POST_REFUSED 5

// Empty polls between two offers of the core while [`mpx_set_busy_poll`] spins, by default
// (the Rust interface's `DEFAULT_BUSY_POLL_YIELD_EVERY`; a test keeps them equal).
#define MPX_DEFAULT_YIELD_EVERY 32

// Success.
#define MPX_OK 0

// An argument is not usable: a null pointer, a handle this context does not have, a value
// out of range.
#define MPX_ERR_INVALID -1

// The datapath refused: a limit, a request that makes no sense for the object.
#define MPX_ERR_REFUSED -2

// The object is another client's (another application's domain, connection or request).
#define MPX_ERR_FORBIDDEN -3

// No such connection, or it ended.
#define MPX_ERR_NO_CONNECTION -4

// A queue is full (a post queue, a CQ's records): nothing was done, try again later.
#define MPX_ERR_AGAIN -5

// Nothing arrived before the timeout.
#define MPX_ERR_TIMEOUT -6

// Completions were lost: the application read too slowly (the count is in the message).
#define MPX_ERR_OVERFLOW -7

// The datapath's socket or protocol failed (the datapath went away).
#define MPX_ERR_IO -8

// A bug inside the library (a panic, caught): the context should be closed.
#define MPX_ERR_INTERNAL -9

// Entries of a scatter-gather list at most.
#define MPX_MAX_SGE 4

// An RDMA Write (`IBV_WR_RDMA_WRITE`).
#define MPX_WR_WRITE 1

// A Send (`IBV_WR_SEND`).
#define MPX_WR_SEND 2

// An RDMA Read (`IBV_WR_RDMA_READ`).
#define MPX_WR_READ 3

// Complete when done (`IBV_SEND_SIGNALED`); without it, only a failure completes.
#define MPX_SEND_SIGNALED 1

// A Send with Solicited Event (`IBV_SEND_SOLICITED`).
#define MPX_SEND_SOLICITED 2

// Start once every Read posted before is answered (`IBV_SEND_FENCE`).
#define MPX_SEND_FENCE 4

// One connection to a datapath's control socket and what the application made through it.
// Opaque to C; not thread-safe (the header's rule).
typedef struct mpx_context mpx_context;

// How a connection is requested or accepted (`rdma_conn_param`). Zeroed, it is what
// `mpx_connect` and `mpx_listen` use: revision 2, CRCs, IRD and ORD 8.
typedef struct mpx_conn_param {
  // The Request's private data (connect only; a listener's is each accept's): at most
  // `MPX_MAX_PRIVATE_DATA` octets, less 8 for revision 2's IRD/ORD; NULL when
  // `private_data_len` is 0.
  const uint8_t *private_data;
  // Octets of `private_data`.
  uint32_t private_data_len;
  // Our IRD (`responder_resources`): Read Requests the peer may have outstanding toward
  // us; 0: 8.
  uint16_t ird;
  // Our ORD (`initiator_depth`): our Reads outstanding at once; 0: 8.
  uint16_t ord;
  // `MPX_CONN_*`.
  uint32_t flags;
  // Connect only: milliseconds each wait of the setup may last (TCP connect, the Reply);
  // 0: the connection manager's own.
  uint32_t timeout_ms;
  // Listen only (`rdma_listen`'s backlog): connection requests waiting for an accept or a
  // reject at most, more are refused with a reset; 0: 16.
  uint32_t backlog;
} mpx_conn_param;

// One connection-manager event (`rdma_cm_event`). Fields an event does not carry are 0,
// `mpa_error` and `terminate_layer` are -1 when absent.
typedef struct mpx_cm_event {
  // `MPX_CM_*`.
  uint32_t event;
  // The listener (`MPX_CM_CONNECT_REQUEST`, `MPX_CM_LISTEN_ENDED`).
  uint64_t listen_id;
  // The connection request or setup.
  uint64_t conn_id;
  // The connection (`MPX_CM_ESTABLISHED`, `MPX_CM_DISCONNECTED`).
  uint64_t flow_id;
  // The peer's private data (its Request at a listener, its Reply at a connector, its
  // rejection's).
  uint8_t private_data[MPX_MAX_PRIVATE_DATA];
  // Octets of `private_data`.
  uint32_t private_data_len;
  // The MPA revision of the peer.
  uint32_t revision;
  // IRD and ORD: the Initiator's as sent at a request, the negotiated ones when
  // established (revision 2, when `has_ird_ord`).
  uint32_t ird;
  // See `ird`.
  uint32_t ord;
  // Whether `ird` and `ord` are set.
  uint32_t has_ird_ord;
  // The MPA error code (RFC 5044 §8), or -1.
  int32_t mpa_error;
  // The Terminate's layer (0 RDMAP, 1 DDP, 2 MPA), or -1.
  int32_t terminate_layer;
  // The Terminate's error type.
  uint32_t terminate_type;
  // The Terminate's error code.
  uint32_t terminate_code;
  // 1 when we sent the Terminate, 0 when the peer did.
  uint32_t terminate_sent;
  // The peer's address, `ip:port` (NUL-terminated).
  char peer[MPX_ADDR_LEN];
  // Our address, `ip:port`.
  char local[MPX_ADDR_LEN];
  // Why, in words (NUL-terminated).
  char reason[MPX_REASON_LEN];
} mpx_cm_event;

// One completion (`ibv_wc`). `status` carries verbs' `ibv_wc_status` numbers (0 success, 2
// local QP operation error, 4 local protection error, 5 flushed, 9 remote invalid request, 10
// remote access error, 11 remote operation error, 12 retry exceeded), and 64 for a full
// queue.
typedef struct mpx_wc {
  // The work request's id (`wr_id + i` for message `i` of a post of several).
  uint64_t wr_id;
  // The connection.
  uint64_t flow_id;
  // Offset in the region of the first octet.
  uint64_t offset;
  // Octets.
  uint64_t byte_len;
  // `MPX_WC_*`.
  uint32_t kind;
  // Verbs' status number.
  uint32_t status;
  // The region.
  uint32_t stag;
  // A Send's MSN (when `has_msn`).
  uint32_t msn;
  // Whether `msn` is set.
  uint32_t has_msn;
  // The STag a received Send with Invalidate names (0: none).
  uint32_t invalidate_stag;
} mpx_wc;

// One scatter-gather entry (`ibv_sge`): `length` octets at `offset` of region `stag`.
typedef struct mpx_sge {
  // Offset in the region.
  uint64_t offset;
  // Octets.
  uint64_t length;
  // The region (our lkey).
  uint32_t stag;
} mpx_sge;

// A work request (`ibv_send_wr`).
typedef struct mpx_send_wr {
  // Message `i` completes with `wr_id + i`.
  uint64_t wr_id;
  // The connection.
  uint64_t flow_id;
  // Write: the sink's tagged offset; Read: the source's; Send: 0.
  uint64_t remote_offset;
  // `MPX_WR_*`.
  uint32_t opcode;
  // `MPX_SEND_*`.
  uint32_t flags;
  // Write: the peer's sink STag; Read: the peer's source STag; Send: 0.
  uint32_t remote_stag;
  // Messages (≥ 1; 1 with more than one entry), message `i` at `offset + i·length`.
  uint32_t count;
  // Entries of `sg_list` used (1 ..= `MPX_MAX_SGE`; a Read: 1).
  uint32_t num_sge;
  // The entries: a Write or Send gathers them, a Read fills the first.
  struct mpx_sge sg_list[MPX_MAX_SGE];
} mpx_send_wr;

#ifdef __cplusplus
extern "C" {
#endif // __cplusplus

// Listens on `bind` (`ip:port`, port 0: any) for domain `pd` (`rdma_bind_addr` +
// `rdma_listen`), MPA revision 2 with CRCs and the datapath's IRD/ORD (8); `*listen_id` is
// the listener, `*port` the port bound.
int mpx_listen(struct mpx_context *ctx,
               uint32_t pd,
               const char *bind,
               uint64_t *listen_id,
               uint16_t *port);

// `mpx_listen` with `param`'s revision, markers, CRC, IRD, ORD and backlog; its private data
// and timeout must be empty (a listener's private data is each accept's).
int mpx_listen_with(struct mpx_context *ctx,
                    uint32_t pd,
                    const char *bind,
                    const struct mpx_conn_param *param,
                    uint64_t *listen_id,
                    uint16_t *port);

// Stops listener `listen_id`.
int mpx_stop_listening(struct mpx_context *ctx, uint64_t listen_id);

// Connects to `remote` (`ip:port`) for domain `pd` with this Request private data
// (`rdma_resolve_addr` … `rdma_connect`; revision 2, CRCs): `*conn_id` is the setup, whose
// outcome comes as an event.
int mpx_connect(struct mpx_context *ctx,
                uint32_t pd,
                const char *remote,
                const uint8_t *private_data,
                uint32_t private_data_len,
                uint64_t *conn_id);

// `mpx_connect` with `param` (`rdma_connect`'s `rdma_conn_param`): its private data,
// IRD/ORD, revision, markers, CRC, peer-to-peer model and setup timeout.
int mpx_connect_with(struct mpx_context *ctx,
                     uint32_t pd,
                     const char *remote,
                     const struct mpx_conn_param *param,
                     uint64_t *conn_id);

// Accepts connection request `conn_id` with this Reply private data (`rdma_accept`).
int mpx_accept(struct mpx_context *ctx,
               uint64_t conn_id,
               const uint8_t *private_data,
               uint32_t private_data_len);

// Rejects connection request `conn_id` with this private data (`rdma_reject`).
int mpx_reject(struct mpx_context *ctx,
               uint64_t conn_id,
               const uint8_t *private_data,
               uint32_t private_data_len);

// The next connection event (`rdma_get_cm_event`), waiting up to `timeout_ms`:
// `MPX_ERR_TIMEOUT` when none came.
int mpx_get_cm_event(struct mpx_context *ctx, uint32_t timeout_ms, struct mpx_cm_event *event);

// The descriptor that becomes readable when a connection event waits (for the
// application's own epoll; `rdma_event_channel`'s fd). The library's: do not close it.
int mpx_cm_fd(struct mpx_context *ctx);

// Ends connection `flow_id` gracefully (`rdma_disconnect`): what is posted goes out, then a
// FIN; a `MPX_CM_DISCONNECTED` event follows.
int mpx_disconnect(struct mpx_context *ctx, uint64_t flow_id);

// Opens a context: connects to the datapath's control socket at `socket_path`
// (`/run/mpa-datapath.sock` by default), each wait for an answer bounded by `timeout_ms`.
// `*out` is the context, for [`mpx_close`].
int mpx_open(const char *socket_path, uint32_t timeout_ms, struct mpx_context **out);

// Closes a context (`ibv_close_device`): its regions, CQs, domains and the connection to
// the datapath go with it. `ctx` may be null.
int mpx_close(struct mpx_context *ctx);

// Allocates a protection domain owned by this context (`ibv_alloc_pd`).
int mpx_alloc_pd(struct mpx_context *ctx, uint32_t *pd);

// Deallocates domain `pd` (`ibv_dealloc_pd`); refused while anything of it remains.
int mpx_dealloc_pd(struct mpx_context *ctx, uint32_t pd);

// Registers `len` octets of memory the datapath allocates in domain `pd` (`ibv_reg_mr`),
// with `MPX_ACCESS_*` flags; `*stag` is its STag (lkey and rkey), for
// [`mpx_region_addr`] and work requests.
int mpx_create_region(struct mpx_context *ctx,
                      uint32_t pd,
                      uint64_t len,
                      uint32_t access,
                      uint32_t *stag);

// Registers `len` octets of the application's own memory, the memfd `fd` (its own mapping
// stays its own), in domain `pd` with `MPX_ACCESS_*` flags (`ibv_reg_mr` over an existing
// buffer): the datapath seals it against resizing and maps it. `*stag` is its STag. The
// memfd must allow sealing (`MFD_ALLOW_SEALING`) or be sealed against shrinking and growing
// already, and be open read-write (docs/consumer.md, "Regions").
int mpx_register_region(struct mpx_context *ctx,
                        int fd,
                        uint64_t len,
                        uint32_t pd,
                        uint32_t access,
                        uint32_t *stag);

// The address and length of region `stag` in this process. The datapath reads and writes
// the octets at any time (placing what peers send, reading what is posted).
int mpx_region_addr(struct mpx_context *ctx, uint32_t stag, void **addr, uint64_t *len);

// Deregisters region `stag` (`ibv_dereg_mr`); its address is not to be used after.
int mpx_destroy_region(struct mpx_context *ctx, uint32_t stag);

// Receives domain `pd`'s completions (`ibv_create_comp_channel`): the rings and the post
// queues in shared memory. Before [`mpx_create_cq`] and posting.
int mpx_subscribe(struct mpx_context *ctx, uint32_t pd);

// Creates a completion queue of domain `pd` holding up to `capacity` completions
// (`ibv_create_cq`).
int mpx_create_cq(struct mpx_context *ctx, uint32_t pd, uint32_t capacity, uint32_t *cq);

// Destroys CQ `cq` (`ibv_destroy_cq`); refused while a connection or domain uses it.
int mpx_destroy_cq(struct mpx_context *ctx, uint32_t cq);

// Every connection of the CQs' domain without CQs of its own completes its requests on
// `send_cq` and what arrives on `recv_cq` (set before connecting or listening).
int mpx_set_domain_cqs(struct mpx_context *ctx, uint32_t send_cq, uint32_t recv_cq);

// Connection `flow_id`'s own send and receive CQs (the queue pair's).
int mpx_bind_cqs(struct mpx_context *ctx, uint64_t flow_id, uint32_t send_cq, uint32_t recv_cq);

// Up to `n` of CQ `cq`'s completions into `wc` (`ibv_poll_cq`), without waiting and without
// a system call: how many (0: none now), or an error.
int mpx_poll_cq(struct mpx_context *ctx, uint32_t cq, struct mpx_wc *wc, uint32_t n);

// How [`mpx_wait_cq`] waits: `busy` 0 sleeps on the domain's descriptor until the datapath
// wakes it (the default), 1 polls the completion rings without sleeping (lower latency, a
// core kept busy), offering the core to other threads every `yield_every` empty polls (0:
// never; `MPX_DEFAULT_YIELD_EVERY` is the library's default). Per context.
int mpx_set_busy_poll(struct mpx_context *ctx, int busy, uint32_t yield_every);

// As [`mpx_poll_cq`], waiting up to `timeout_ms` for a completion (sleeping on the domain's
// descriptor, or polling after [`mpx_set_busy_poll`]): 0 when none came.
int mpx_wait_cq(struct mpx_context *ctx,
                uint32_t cq,
                struct mpx_wc *wc,
                uint32_t n,
                uint32_t timeout_ms);

// The descriptor that becomes readable when CQ `cq`'s domain has completions and was armed
// ([`mpx_arm_cq`]): for the application's own epoll. It stays the library's: do not close it.
int mpx_cq_fd(struct mpx_context *ctx, uint32_t cq);

// Asks for a wake-up of [`mpx_cq_fd`] at the next completion of the CQ's domain
// (`ibv_req_notify_cq`): 1 armed (wait on the descriptor, then [`mpx_ack_cq`] and poll), 0
// completions are waiting already (poll now).
int mpx_arm_cq(struct mpx_context *ctx, uint32_t cq);

// After [`mpx_cq_fd`] became readable (`ibv_ack_cq_events`): reads it empty and disarms.
int mpx_ack_cq(struct mpx_context *ctx, uint32_t cq);

// The message of the calling thread's last failure (empty before any): valid until this
// thread's next failing call.
const char *mpx_last_error(void);

// A constant name of error code `code` (`"MPX_ERR_FORBIDDEN"`), `"MPX_OK"` for 0, or
// `"unknown"`.
const char *mpx_error_name(int code);

// Posts work request `*wr` through the connection's shared-memory post queue
// (`ibv_post_send`): no system call unless the worker sleeps. `MPX_ERR_AGAIN`: the queue is
// full, nothing was posted. What the datapath refuses comes back as a completion.
int mpx_post_send(struct mpx_context *ctx, const struct mpx_send_wr *wr);

// Posts `count` receive buffers of `length` octets each, back to back in region `stag` from
// `offset`, to connection `flow_id` (`ibv_post_recv`); buffer `i` completes with
// `wr_id + i`.
int mpx_post_recv(struct mpx_context *ctx,
                  uint64_t flow_id,
                  uint32_t stag,
                  uint64_t offset,
                  uint32_t length,
                  uint32_t count,
                  uint64_t wr_id);

// Posts receive buffers into domain `pd`'s shared receive queue (`ibv_post_srq_recv`):
// every connection handed over into the domain from then on draws from it.
int mpx_post_srq_recv(struct mpx_context *ctx,
                      uint32_t pd,
                      uint32_t stag,
                      uint64_t offset,
                      uint32_t length,
                      uint32_t count,
                      uint64_t wr_id);

#ifdef __cplusplus
}  // extern "C"
#endif  // __cplusplus

#endif  /* MPAXDP_H */
