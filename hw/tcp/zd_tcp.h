/*
 * Private header of the TCP soft device (hw/tcp): hosts without RDMA
 * hardware.  Wire protocol: zd_tcp_wire.h.
 *
 * Files: zd_tcp_dev.c (the IA), zd_tcp_cq.c (CQs and the IA's thread),
 * zd_tcp_post.c (posts, SRQ), zd_tcp_qp.c (QP lifetime and its sockets),
 * zd_tcp_progress.c (the progress flag and its work loop), zd_tcp_tx.c
 * (frames out, request completions), zd_tcp_rx.c (frames in: checks,
 * dispatch, placement), zd_tcp_flush.c (disconnect, flush, breaking),
 * zd_tcp_ud.c (unreliable datagrams: zd_tcp_ud.h), zd_tcp_keymemo.h (the
 * key checks' memo).
 *
 * Model: one non-blocking TCP socket per connected QP, driven by whoever
 * progresses the QP (the consumer's polls, or the IA's thread: below):
 *  - a post validates the local segments (lkey, bounds, PZ, LOCAL_WRITE
 *    where written; the poster's key memo, zd_tcp_keymemo.h, answers a
 *    key it checked before), appends a request to the QP's preallocated
 *    send queue (no lock, no allocation) and transmits what the socket
 *    takes (one send of a small frame, else sendmsg with an iovec: header
 *    + segments); the rest goes out on the next progress;
 *  - cq_poll (dat_evd_dequeue / dat_evd_wait on the recv or request EVD)
 *    returns the completions already waiting in its local ring without
 *    touching a socket; finding none, it
 *    progresses every QP feeding that EVD: transmits queued frames, reads
 *    incoming ones, lands RDMA writes straight into registered memory after
 *    the checks, answers RDMA reads, places sends into posted receives (or
 *    SRQ buffers), and turns ACKs and read responses into completions.
 *
 * WHO MAKES PROGRESS AT THE TARGET.  An RDMA write's data is placed, an
 * RDMA read is answered, a send is received and an ACK goes out only when
 * the target's library runs for that QP:
 *  - progress=thread (the default): the IA's thread (zd_tcp_cq.c) keeps
 *    every QP's socket armed in its epoll set and serves a QP whose socket
 *    becomes ready, unless a consumer is polling that QP's EVDs (then the
 *    consumer's polling is the fast path and the thread only rechecks, 20 us
 *    to 1 ms later).  A target that spins on memory or sleeps elsewhere
 *    needs nothing more.
 *  - progress=manual: only while a thread of the target polls
 *    (dat_evd_dequeue, dat_evd_wait) the EP's recv EVD or request EVD, or
 *    polls any DTO EVD of the same IA and finds it empty (an idle poll
 *    drives every QP of the IA), or while any thread of the target sleeps
 *    in dat_evd_wait on any DTO EVD of the same IA (the IA's thread wakes
 *    it when frames arrive and it progresses every QP of the IA before
 *    sleeping again).  A target that neither polls nor waits (spinning on
 *    memory) stalls the initiator's RDMA writes and reads.
 *
 * Oversubscribed hosts (more busy-polling processes than cores, as MPI
 * jobs run): a message moves only once the target's consumer or the IA's
 * thread gets a CPU, and a spinner keeps its CPU for a whole scheduler
 * slice.  So cq_poll gives its CPU away (sched_yield) after
 * ZD_TCP_IDLE_YIELD polls in a row that brought nothing (no event, no
 * byte read from any of its QPs' sockets): on a host with a core to spare
 * the yield returns at once (a syscall per 16 idle polls, each of which
 * already costs a recv), oversubscribed it hands the CPU to the peer or
 * the IA's thread (tools/oversub.sh).  Not for pinned pollers.
 *
 * Receiving: one recv into the QP's staging buffer (ZD_TCP_RX_STAGE)
 * brings a small frame's header and payload, and the frames behind it, in
 * one system call; each header is checked (rx_dispatch,
 * zd_tcp_frame_check) before its payload is copied out of the buffer, and a
 * payload rest of ZD_TCP_RX_DIRECT bytes or more is read straight into its
 * destination (readv: the kernel's copy is the only one).  Staged frames are
 * all taken before a progress returns (an armed socket must mean unread
 * data), unless the QP stalls for a receive or breaks; a read that brought
 * less than it asked for emptied the socket, so the progress does not read
 * again (that recv would fail with EAGAIN at the end of every message).
 * A send costs one send at the initiator (a frame of ZD_TCP_TX_FLAT bytes
 * or less is copied whole into one buffer: a plain send is cheaper for
 * the kernel than a sendmsg of two iovecs; larger ones go out with
 * sendmsg, header and payload in one iovec) and one recv at the target,
 * as the raw socket ping-pong of zd_floor does: sends are not ACKed (the
 * initiator completed them when the kernel took them; an ACK of a later
 * RDMA write covers them).
 * Measured on loopback and left out (2026-11-22, perftest and a raw socket
 * test): SO_BUSY_POLL (loopback has no device queue to poll: no gain) and
 * MSG_ZEROCOPY for large sends (loopback delivery copies anyway, and every
 * completion came back "copied": 0.37x a plain 1 MiB stream).
 *
 * Completion semantics at the initiator: a send completes when all of it
 * was handed to the kernel (as on the shm device, where a send completes
 * when its data is in the target's memory or eager ring: the target need
 * not poll); an RDMA write, with immediate data or not, when the target
 * ACKed it (it was placed, or it failed the target's checks and the
 * completion carries DAT_DTO_ERR_REMOTE_ACCESS); an RDMA read when its
 * response landed; an atomic (IB extension) when its response brought the
 * word's earlier value, stored in the local segment first.
 * Completions of an EP are reported in post order, so a send posted after
 * an RDMA write or read completes after it.  A send the target refuses
 * (its receive is too short) has already completed: the target's NAK then
 * breaks the connection and later DTOs complete flushed.
 *
 * Receive not posted: a send of up to ZD_TCP_EAGER_SIZE bytes is read into
 * the QP's eager buffer (ZD_TCP_EAGER_SLOTS of them) and matched, in order,
 * to the receives posted later; a larger one, or one finding the eager
 * buffer full, stops the reading of the socket until a receive is posted
 * (TCP flow control is the RNR backpressure), and the frames behind it
 * (including ACKs and read responses for the target's own requests) wait.
 * Early sends outlive a flush: a receive posted after the disconnect still
 * gets them (their senders saw them complete), later ones flush.  An RDMA
 * write with immediate data that finds no receive is placed and ACKed and
 * takes an eager slot (no buffer: it writes no receive), in order with the
 * early sends; with the slots full it stops the socket as a send does.
 *
 * Atomics (IB extensions) run on the target as their frames arrive, with a
 * CPU atomic on the word (zd_tcp_rx.c says why that is enough), and are
 * answered in order with the read responses.
 *
 * One descriptor per connected QP (progress=thread on both sides): the QP's
 * socket is the CM's connection, handed over once ESTABLISHED (qp_carry;
 * none before: an unconnected EP holds no descriptor).  The CM's frames of
 * the connection travel in the stream (zd_tcp_wire.h): qp_cm_send queues
 * DISC and DISC_ACK behind the requests posted before them (PING and PONG
 * go next), and the receive side hands the peer's to the CM
 * (zd_cm_dev_frame) in stream order.  So a DISC arrives after everything
 * sent before it, and the peer's CM hears PINGs and DISCs as long as its
 * IA's thread reads the stream, consumer or not.  A CM frame behind a send
 * that waits for a receive never posted (larger than an eager slot, or
 * with the slots full) waits with it: a peer's DISC is seen once a receive
 * takes that send, and a peer that waits that long for its PONGs judges
 * this process hung (ZDAPL_PEER_TIMEOUT_MS, zd_cm_liveness.h).
 * With progress=manual on either side nothing reads the stream while the
 * consumer does not, so the CM keeps its socket (its PINGs and DISCs must
 * pass frames nobody reads) and the QP has a data connection of its own
 * (two descriptors): the passive side listens (qp_local_blob, after
 * qp_connect said so), the active side connects, each side's first frame
 * is a HELLO with the peer's token.
 *
 * Disconnect ordering: carried, the DISC follows the data in the stream.
 * On a data connection of its own the CM's DISC could overtake data still
 * in flight, so qp_flush first waits (ZD_TCP_DRAIN_US at most) until the
 * peer's kernel acknowledged every byte we sent (carried too: the DISC and
 * what precedes it go out first), and the flush's harvest reads all the
 * socket holds and waits (ZD_TCP_HARVEST_MS at most) for the rest of a
 * frame already begun.
 *
 * Request completions: a request's send queue slot is released (sq_head)
 * before its completion is published, so a consumer on another thread (the
 * IA's thread completes requests too) that reaps it can post at once.
 *
 * Breaking: a frame failing validation, a NAK, EOF or a socket error puts
 * the QP in error and flushes it (every outstanding DTO completes
 * DAT_DTO_ERR_FLUSHED, or the error it carries) and shuts the socket down;
 * a protocol or protection violation by the peer also posts
 * DAT_ASYNC_ERROR_EP_BROKEN for the EP.  Unless the consumer ended it
 * (qp_flush), the CM is told, and it ends the connection,
 * DAT_CONNECTION_EVENT_BROKEN on both EPs, after a short grace
 * (zd_cm_dev_broken) for a graceful DISC racing on the CM's socket or the
 * consumer's own disconnect after the error it saw; a carried stream's
 * EOF at once (zd_cm_dev_frame, ZD_CM_DEV_END: after the DISC the stream
 * may have brought, in order).  The
 * sockets carry keepalive and TCP_USER_TIMEOUT (zd_cm_sock_keepalive), so
 * a peer gone without FIN/RST (link down) errors them in bounded time.
 * qp_flush (disconnect) first harvests what already arrived, then flushes.
 *
 * Not yet: an SRQ buffer posted while a QP is stalled on it is noticed at
 * the next poll of that QP's EVDs or the thread's next recheck (1 ms), not
 * at once; RMR rkeys are not accepted.
 *
 * Concurrency: all per-QP protocol state is owned by whoever holds the
 * QP's progress flag (a try-lock, never waited on): a thread that wants
 * work done tries the flag, and finding it held sets its bits in qp->want
 * and tries once more; the holder loops until want stays empty, so a
 * request is never lost.  Completions go straight into the EVD ring when
 * the CQ's local MPSC ring is drained (zd_evd_cq_post_direct, any
 * thread), else into that ring, which cq_poll moves into the EVD.
 * The poster side of the send queue and of the receive queue is one thread
 * at a time (the consumer's, as with nonthreadsafe DAT).
 *
 * Sleeping: a thread about to sleep in dat_evd_wait (cq_arm) first
 * progresses every QP of the IA, then registers their sockets (EPOLLONESHOT,
 * EPOLLIN unless the receive side is stalled, EPOLLOUT while frames wait to
 * go out) in the IA's epoll set.  progress=thread: the IA's thread serves
 * the QP that fired and its completions wake the sleeper.  progress=manual:
 * the thread wakes (zd_waiter_notify) every DTO EVD of the IA, and the woken
 * thread progresses them all again before it sleeps, so a thread asleep on
 * any DTO EVD of the IA drives every EP of the IA (consumers such as
 * dapltest sleep on one EP's EVD while the peer waits for another EP of
 * theirs).  No syscall on the data path besides the socket I/O itself: the
 * sleep path and the thread pay for the rest.
 */
#ifndef ZD_TCP_H
#define ZD_TCP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include "core/zd_compiler.h"
#include "core/zd_device.h"
#include "evd/zd_dto_event.h"
#include "evd/zd_ring.h"
#include "hw/soft/zd_soft_cq.h"
#include "hw/tcp/zd_tcp_keymemo.h"
#include "hw/tcp/zd_tcp_wire.h"

#define ZD_TCP_MAX_SEGS      16
#define ZD_TCP_RESP_DEPTH    64     /* read requests answered but not yet sent */
#define ZD_TCP_RX_BATCH      64     /* frames read per progress of one QP */
#define ZD_TCP_EAGER_SLOTS   64     /* sends received before their receive was posted */
#define ZD_TCP_EAGER_SIZE    4096   /* ... up to this size each */
#define ZD_TCP_DRAIN_US      1000000 /* qp_flush: wait for the peer's ACK of our bytes */
#define ZD_TCP_HARVEST_MS    100    /* qp_flush: wait for the rest of a frame begun */
#define ZD_TCP_RX_STAGE      16384  /* receive staging buffer: one recv, many frames */
#define ZD_TCP_RX_DIRECT     8192   /* a payload rest this large is read in place */
#define ZD_TCP_IDLE_YIELD    16     /* cq_poll: sched_yield after this many idle polls */
#define ZD_TCP_TX_FLAT       256    /* a frame this small goes out as one buffer (send) */
#define ZD_TCP_CTL_DEPTH     8      /* CM frames queued for the stream (qp_cm_send) */

struct zd_tcp_seg {
	uint64_t addr;
	uint64_t len;
};

struct zd_tcp_cq;
struct zd_tcp_qp;
struct zd_tcp_srq;
struct zd_tcp_ud;

struct zd_tcp_ia {
	struct zd_ia *ia;
	pthread_mutex_t lock;             /* control path: lists, waker */
	struct zd_tcp_qp *qps;            /* every QP (waker checks membership) */
	struct zd_soft_cq *cqs;           /* every CQ (the waker wakes them all) */
	int epfd;                         /* the waker's set */
	int stopfd;                       /* eventfd: waker exits */
	pthread_t waker;
	bool waker_running;
	bool auto_progress;               /* progress=thread (default) */
	uint32_t nparked;                 /* QPs the thread rechecks each tick */
	_Atomic uint64_t lmr_gen;         /* moves on every LMR free (zd_tcp_keymemo.h) */
};

struct zd_tcp_cq {
	/* Consumer activity, for the progress thread: cq_poll counts, cq_arm
	 * notes the count before its sleep.  Own line: the consumer writes it. */
	_Atomic uint64_t polls ZD_CACHE_ALIGNED;
	_Atomic uint64_t arm_polls;
	_Atomic uint32_t idle_polls;      /* polls in a row that found nothing */
	struct zd_soft_cq soft ZD_CACHE_ALIGNED;  /* evd, local ring, tia->cqs link */
	struct zd_tcp_ia *tia;
	struct zd_soft_qplist *_Atomic qps;  /* RCU: QPs feeding this CQ */
	/* The sockets of those QPs, level-triggered (zd_tcp_qp_watch): a
	 * poll of more than ZD_TCP_WALK_ALL QPs progresses only the ones it
	 * names ready, so an idle connection costs a poll nothing; -1: walk
	 * them all (no epoll set). */
	int epfd;
};

/* A CQ fed by up to this many QPs walks them all on every poll (a recv
 * each: cheaper than asking epoll first); more: only those ready. */
#define ZD_TCP_WALK_ALL 16

/* One posted receive (RQ or SRQ): segments checked at post time. */
struct zd_tcp_recv {
	DAT_DTO_COOKIE cookie;
	uint32_t nseg;
	uint32_t pad;
	uint64_t total;
	struct zd_tcp_seg seg[ZD_TCP_MAX_SEGS];
};

struct zd_tcp_srq {
	struct zd_srq *srq;
	struct zd_tcp_recv *slots;
	uint32_t depth;                   /* power of two */
	_Atomic uint64_t posted;          /* poster */
	_Atomic uint64_t head;            /* CAS by the QPs taking buffers */
	struct zd_tcp_keymemo memo;       /* poster's */
};

/* A request in the send queue. */
struct zd_tcp_wr {
	DAT_DTOS op;
	DAT_COMPLETION_FLAGS flags;
	DAT_DTO_COOKIE cookie;
	uint32_t nseg;
	uint32_t status;                  /* preset: local check failed */
	uint64_t total;
	uint32_t rkey;
	uint32_t done;                    /* READ, atomics: response landed */
	uint64_t raddr;
	uint32_t imm;                     /* RDMA_WRITE_IMMED: the immediate data */
	uint32_t pad;
	uint64_t operands[2];             /* atomics: the frame's payload (wire order) */
	struct zd_tcp_seg seg[ZD_TCP_MAX_SEGS];
};

/* Is @op an IB extension atomic (its request waits for an ATOMIC_RESP)? */
static inline bool zd_tcp_op_atomic(DAT_DTOS op)
{
	return op == (DAT_DTOS)DAT_IB_DTO_FETCH_ADD || op == (DAT_DTOS)DAT_IB_DTO_CMP_SWAP;
}

/* What the payload being received completes (qp->rx_kind). */
enum zd_tcp_rx_kind {
	ZD_TCP_RX_NONE,
	ZD_TCP_RX_RECV,           /* a SEND into the receive in rx_recv */
	ZD_TCP_RX_WRITE,          /* an RDMA_WRITE: ACK it */
	ZD_TCP_RX_READ_RESP,      /* our read rx_wr: done */
	ZD_TCP_RX_EAGER,          /* an early SEND into the eager buffer */
	ZD_TCP_RX_WRITE_IMM,      /* a WRITE_IMM: ACK it, complete rx_recv */
	ZD_TCP_RX_WRITE_IMM_EARLY,/* a WRITE_IMM before its receive: eager entry, ACK */
	ZD_TCP_RX_ATOMIC,         /* an atomic's operands into rx_operands: execute */
};

enum zd_tcp_conn_state {
	ZD_TCP_IDLE,        /* no socket yet (carried: the CM hands it over, qp_carry) */
	ZD_TCP_LISTEN,      /* a socket of its own: waiting for the active side's */
	ZD_TCP_CONNECTING,  /* a socket of its own: non-blocking connect in flight */
	ZD_TCP_UP,          /* socket up (a socket of its own: HELLOs may be in flight) */
	ZD_TCP_DOWN,        /* broken or flushed: never used again */
};

/* Work bits of qp->want. */
#define ZD_TCP_W_TX    0x1u
#define ZD_TCP_W_RX    0x2u
#define ZD_TCP_W_FLUSH 0x4u

struct zd_tcp_qp {
	struct zd_ep *ep;
	struct zd_tcp_ia *tia;
	struct zd_tcp_qp *next;           /* tia->qps */
	struct zd_tcp_cq *recv_cq, *req_cq;
	struct zd_tcp_srq *srq;
	struct zd_tcp_ud *ud;              /* a UD QP (zd_tcp_ud.h); NULL: RC */

	_Atomic uint32_t error;           /* flushed: every DTO completes flushed */
	_Atomic uint32_t want;            /* work asked of the progress holder */
	_Atomic uint32_t busy;            /* progress try-lock */
	_Atomic uint32_t tx_pending;      /* frames wait for socket room (for arm) */
	_Atomic uint32_t rx_stalled;      /* a send waits for a receive (for arm) */
	_Atomic uint64_t rx_moves;        /* holder: reads that brought bytes (cq_poll) */
	bool lw_sent;                     /* SRQ "last WQE" event posted */
	bool local_end;                   /* the consumer ended it (qp_flush) */
	bool reported;                    /* the CM was told it broke */
	bool in_eager;                    /* zd_tcp_eager_match runs (flush: no recursion) */

	/* progress thread (under tia->lock) */
	bool parked;                      /* disarmed: rechecked at park_until */
	uint64_t park_until, park_ns;     /* next recheck, backoff */
	uint64_t seen_polls[2];           /* recv_cq, req_cq polls last looked at */

	/* connection (fd swaps also under fd_lock, for cq_arm) */
	pthread_mutex_t fd_lock;
	int watch_fd;                     /* in its CQs' epoll sets, with watch_events; -1: none */
	uint32_t watch_events;
	bool unwatched;                   /* going away: never watched again */
	int fd;                           /* the connection's socket */
	enum zd_tcp_conn_state cstate;   /* written by zd_tcp_qp_set_cstate only */
	bool flushed;                     /* the flush ran since create/reset */
	bool destroying;
	bool stale;                       /* flushed after a connection began */
	bool blob_sent;                   /* qp_local_blob ran (the active side's, first) */
	bool peer_ok;                     /* qp_connect took the peer's blob */
	bool carried;                     /* it rides the CM's socket (qp_carry) */
	/* a socket of its own (progress=manual on either side, zd_tcp_wire.h):
	 * the passive side's listener, the active side connects */
	int lis_fd;                       /* our listener until the peer's HELLO came */
	int accept_spare;                 /* the descriptor our accept will take, held
					   * from qp_local_blob (-1: none) */
	bool connector;
	bool hello_sent, hello_rcvd;
	uint64_t token, peer_token;
	uint32_t lis_addr;                /* network order */
	uint16_t lis_port;                /* network order */

	/* CM frames for the stream (qp_cm_send): produced under zd_cm.lock,
	 * sent by the holder once the send queue reached ctl[].after */
	struct {
		uint32_t type;
		uint64_t id;
		uint64_t after;           /* sq position it follows (PING, PONG: 0) */
	} ctl[ZD_TCP_CTL_DEPTH];
	_Atomic uint32_t ctl_tail;        /* producer */
	_Atomic uint32_t ctl_head;        /* holder */

	/* key checks' memos: the send queue's poster, the receive queue's,
	 * the holder's (the peer's RDMA frames) */
	struct zd_tcp_keymemo sq_memo, rq_memo, rx_memo;

	/* receive queue: poster fills, progress holder consumes */
	struct zd_tcp_recv *rq;
	uint32_t rq_depth;
	_Atomic uint64_t rq_tail;         /* poster */
	_Atomic uint64_t rq_head;         /* holder */

	/* send queue: poster fills [sq_head, sq_tail) */
	struct zd_tcp_wr *sq;
	uint32_t sq_depth;
	_Atomic uint64_t sq_tail;         /* poster */
	_Atomic uint64_t sq_head;         /* holder: completed so far */
	uint64_t sq_tx;                   /* holder: next to transmit */
	uint64_t sq_acked;                /* holder: requests < this are acked */
	uint64_t sq_base;                 /* position of this connection's seq 0 */

	/* transmit state (holder) */
	struct {                          /* the header; a small frame whole */
		struct zd_tcp_hdr hdr;
		uint8_t payload[ZD_TCP_TX_FLAT - sizeof(struct zd_tcp_hdr)];
	} __attribute__((packed)) tx_frame;
	struct iovec tx_iov[ZD_TCP_MAX_SEGS + 1];
	uint32_t tx_niov;
	uint64_t tx_left;                 /* bytes of the current frame still to go */
	bool tx_busy;                     /* a frame is (partly) out */
	bool tx_is_req;                   /* it is request sq_tx */
	bool ack_pending;
	uint32_t ack_seq;
	bool nak_pending;
	uint32_t nak_seq, nak_status;
	struct {                          /* READ_RESPs and ATOMIC_RESPs, in order */
		uint32_t seq;
		uint32_t len;             /* READ_RESP: bytes, from addr */
		uint64_t addr;
		uint64_t value;           /* ATOMIC_RESP: the word's earlier value */
		uint8_t op;               /* ZD_TCP_OP_READ_RESP or _ATOMIC_RESP */
	} resp[ZD_TCP_RESP_DEPTH];
	uint32_t resp_head, resp_tail;

	/* Odd while the holder places a remote write's bytes (a memcpy or a
	 * readv): zd_tcp_mr_deregister waits for it to move. */
	_Atomic uint32_t rx_placing;
	/* receive state (holder) */
	uint8_t *rx_buf;                  /* staging: ZD_TCP_RX_STAGE bytes */
	uint32_t rx_off, rx_end;          /* [rx_off, rx_end) staged, not yet consumed */
	struct zd_tcp_hdr rx_hdr;
	uint32_t rx_hgot;                 /* header bytes read */
	bool rx_in_payload;
	struct iovec rx_iov[ZD_TCP_MAX_SEGS + 1];  /* + the tail alone (rx_segs) */
	uint32_t rx_niov, rx_iov_i;
	uint64_t rx_left;
	/* A payload placed in memory a peer's key granted (RDMA write): the
	 * LMR generation its check saw, and whether a deregistration since
	 * took the range away (the rest is read and dropped, the write NAKed:
	 * zd_tcp_rx_placing) */
	uint64_t rx_gen;
	bool rx_remote, rx_discard;
	uint32_t rx_expect;               /* next request seq from the peer */
	/* what the payload being read completes */
	enum zd_tcp_rx_kind rx_kind;
	struct zd_tcp_recv rx_recv;       /* the receive being filled (copy) */
	bool rx_recv_srq;
	uint64_t rx_wr;                   /* read response: sq position */
	uint64_t rx_operands[2];          /* an atomic's payload (wire order) */

	/* sends (and writes with immediate data) that found no receive
	 * posted (holder), matched in order to later receives; a larger
	 * send, or a full queue, stops the reading instead */
	uint8_t *eager_buf;               /* EAGER_SLOTS x EAGER_SIZE */
	struct {
		uint32_t len;
		uint32_t seq;
		uint32_t imm;
		bool write_imm;           /* data placed already: imm, no buffer */
	} eager[ZD_TCP_EAGER_SLOTS];
	uint32_t eager_head, eager_tail;
	_Atomic uint32_t eager_n;         /* waiting there (post_recv reads it) */
};

/* ---- zd_tcp_cq.c ---- */
zd_device_cq_create_fn zd_tcp_cq_create;
zd_device_cq_destroy_fn zd_tcp_cq_destroy;
zd_device_cq_poll_fn zd_tcp_cq_poll;
zd_device_cq_arm_fn zd_tcp_cq_arm;
int zd_tcp_cq_attach(struct zd_tcp_cq *cq, struct zd_tcp_qp *qp, bool add);
/* A completion of @op (an IB extension operation becomes its
 * DAT_IB_DTO_EVENT, zd_dto_event.h); any thread. */
void zd_tcp_cq_complete(struct zd_tcp_cq *cq, struct zd_ep *ep, DAT_DTO_COOKIE cookie,
			DAT_DTO_COMPLETION_STATUS st, uint64_t len, DAT_DTOS op);
/* A receive consumed by an RDMA write with immediate data @imm. */
void zd_tcp_cq_complete_imm(struct zd_tcp_cq *cq, struct zd_ep *ep, DAT_DTO_COOKIE cookie,
			    uint64_t len, uint32_t imm);
int zd_tcp_waker_start(struct zd_tcp_ia *tia);
void zd_tcp_waker_stop(struct zd_tcp_ia *tia);

/* ---- zd_tcp_qp.c ---- */
zd_device_qp_create_fn zd_tcp_qp_create;
zd_device_qp_local_blob_fn zd_tcp_qp_local_blob;
zd_device_qp_connect_fn zd_tcp_qp_connect;
zd_device_qp_reset_fn zd_tcp_qp_reset;
zd_device_qp_destroy_fn zd_tcp_qp_destroy;
/* Registers @qp's socket one-shot in the IA's epoll set for what a
 * sleeping consumer needs (cq_arm). */
void zd_tcp_qp_arm(struct zd_tcp_qp *qp);
/* progress=thread: zd_tcp_qp_arm, so the IA's thread serves the QP. */
void zd_tcp_qp_auto_arm(struct zd_tcp_qp *qp);
zd_device_qp_carry_fn zd_tcp_qp_carry;
zd_device_qp_cm_send_fn zd_tcp_qp_cm_send;
/* Closes @*fdp (under fd_lock: cq_arm never sees a stale number). */
void zd_tcp_fd_close(struct zd_tcp_qp *qp, int *fdp);
/* Holder: accepts the peer on our listener or finishes our connect (a
 * socket of its own). */
void zd_tcp_conn_progress(struct zd_tcp_qp *qp);

/* ---- zd_tcp_progress.c ---- */
/* Asks for @bits of work on @qp and does it unless another thread holds
 * the QP (then that thread does it before letting go). */
void zd_tcp_qp_progress(struct zd_tcp_qp *qp, uint32_t bits);
/* Control path: takes the progress flag, waiting for its holder. */
void zd_tcp_qp_lock(struct zd_tcp_qp *qp);
/* Lets go, and does the work asked meanwhile. */
void zd_tcp_qp_unlock(struct zd_tcp_qp *qp);
/* Holder: one round of the work bits @want (ZD_TCP_W_*). */
void zd_tcp_qp_work(struct zd_tcp_qp *qp, uint32_t want);

/* ---- zd_tcp_tx.c (holder) ---- */
/* Writes frames until none is left or the socket is full. */
void zd_tcp_tx_progress(struct zd_tcp_qp *qp);
/* Holder, ending the stream: sends the queued CM frames now if it is
 * between frames (best effort: a DISC before the socket shuts). */
void zd_tcp_tx_ctl_last(struct zd_tcp_qp *qp);
/* Completes request @pos (the next one, in post order) with @st. */
void zd_tcp_req_complete(struct zd_tcp_qp *qp, uint64_t pos, uint32_t st);
/* Completes, in post order, the requests that are done. */
void zd_tcp_sq_complete(struct zd_tcp_qp *qp);
/* Refuses request @seq of the peer with @status, then breaks. */
void zd_tcp_qp_nak(struct zd_tcp_qp *qp, uint32_t seq, uint32_t status);

/* The QP's holder (qp lock) changes cstate; zd_tcp_qp_arm (under fd_lock
 * only) and the progress thread's checks read it without the qp lock.
 * relaxed on both sides: a stale view costs a spurious or a later
 * wake-up, which the re-poll after arm covers; what a new state
 * publishes (the fd) is ordered by fd_lock. */
/* The QP's socket in its CQs' epoll sets, as its state and tx_pending
 * say: the listener (EPOLLIN), a connecting socket (EPOLLOUT), a
 * connected one (EPOLLIN, and EPOLLOUT while frames wait for room), or
 * none (takes fd_lock; a system call or two when that changed). */
void zd_tcp_qp_watch(struct zd_tcp_qp *qp);
/* Out of its CQs' epoll sets for good, before it leaves their QP lists
 * (a poller that finds it ready is inside the list's grace period). */
void zd_tcp_qp_unwatch(struct zd_tcp_qp *qp);

static inline void zd_tcp_qp_set_cstate(struct zd_tcp_qp *qp, enum zd_tcp_conn_state s)
{
	__atomic_store_n(&qp->cstate, s, __ATOMIC_RELAXED);
	zd_tcp_qp_watch(qp);
}

/* A receive completes on the recv EVD (if any).  Inline: every received
 * send ends here. */
static inline void zd_tcp_recv_complete(struct zd_tcp_qp *qp, DAT_DTO_COOKIE cookie,
					uint32_t st, uint64_t len)
{
	if (qp->recv_cq)
		zd_tcp_cq_complete(qp->recv_cq, qp->ep, cookie, (DAT_DTO_COMPLETION_STATUS)st, len,
				   DAT_DTO_RECEIVE);
}

/* A receive completes in error or flushed (no bytes): a DAT_IB_DTO_EVENT
 * (DAT_IB_DTO_RECV_UD) for a UD QP, as every receive completion of a UD
 * EP is under OFED; a plain receive completion else. */
static inline void zd_tcp_recv_fail(struct zd_tcp_qp *qp, DAT_DTO_COOKIE cookie, uint32_t st)
{
	if (qp->recv_cq)
		zd_tcp_cq_complete(qp->recv_cq, qp->ep, cookie, (DAT_DTO_COMPLETION_STATUS)st, 0,
				   qp->ud ? (DAT_DTOS)DAT_IB_DTO_RECV_UD : DAT_DTO_RECEIVE);
}

/* A receive consumed by a WRITE_IMM completes (DAT_IB_DTO_RECV_IMMED,
 * the write's length, @imm) on the recv EVD (if any). */
static inline void zd_tcp_recv_complete_imm(struct zd_tcp_qp *qp, DAT_DTO_COOKIE cookie,
					    uint64_t len, uint32_t imm)
{
	if (qp->recv_cq)
		zd_tcp_cq_complete_imm(qp->recv_cq, qp->ep, cookie, len, imm);
}

/* ---- zd_tcp_rx.c (holder) ---- */
/* Reads and dispatches frames: all that is staged, and at most
 * ZD_TCP_RX_BATCH more, unless the QP stalls or breaks. */
void zd_tcp_rx_progress(struct zd_tcp_qp *qp);
/* Early sends into the receives posted since, in order. */
void zd_tcp_eager_match(struct zd_tcp_qp *qp);

/* ---- zd_tcp_flush.c ---- */
zd_device_qp_flush_fn zd_tcp_qp_flush;
/* Holder: every outstanding DTO completes (flushed, or its error). */
void zd_tcp_qp_flush_locked(struct zd_tcp_qp *qp);
/* Holder: the connection is unusable: error, flush, the CM is told. */
void zd_tcp_qp_break(struct zd_tcp_qp *qp);
/* Holder: zd_tcp_qp_break for the stream's EOF (carried: the CM is told
 * at once, zd_cm_dev_frame). */
void zd_tcp_qp_break_eof(struct zd_tcp_qp *qp);
/* Holder: zd_tcp_qp_break for a peer's violation (also an async event). */
__attribute__((cold)) void zd_tcp_qp_break_violation(struct zd_tcp_qp *qp);
/* Holder: reads what the socket holds before a graceful flush. */
void zd_tcp_harvest(struct zd_tcp_qp *qp);
/* ZDAPL_TCP_DEBUG is set (read once, by any thread). */
bool zd_tcp_debug_on(void);
/* ZDAPL_TCP_DEBUG=1: says on stderr why @qp breaks. */
__attribute__((cold)) void zd_tcp_qp_why(struct zd_tcp_qp *qp, const char *why,
					 const char *file, int line);
#define ZD_TCP_QP_WHY(qp, why) zd_tcp_qp_why((qp), (why), __FILE__, __LINE__)

/* ---- zd_tcp_dev.c ---- */
zd_device_mr_deregister_fn zd_tcp_mr_deregister;

/* ---- zd_tcp_post.c ---- */
zd_device_post_send_fn zd_tcp_post_send;
zd_device_post_recv_fn zd_tcp_post_recv;
zd_device_post_rdma_write_fn zd_tcp_post_rdma_write;
zd_device_post_rdma_read_fn zd_tcp_post_rdma_read;
zd_device_post_rdma_write_imm_fn zd_tcp_post_rdma_write_imm;
zd_device_post_atomic_fn zd_tcp_post_atomic;
zd_device_srq_create_fn zd_tcp_srq_create;
zd_device_srq_resize_fn zd_tcp_srq_resize;
zd_device_srq_destroy_fn zd_tcp_srq_destroy;
zd_device_srq_post_recv_fn zd_tcp_srq_post_recv;
/* Takes the next posted SRQ buffer into @out; false if none. */
bool zd_tcp_srq_take(struct zd_tcp_srq *s, struct zd_tcp_recv *out);
void zd_tcp_srq_check_lw(struct zd_tcp_srq *s);

#endif /* ZD_TCP_H */
