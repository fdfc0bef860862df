/*
 * Connection manager: one thread per process, blocking in epoll, drives
 * every DAT connection over TCP (see zd_cm_wire.h for the frames).
 *
 * Locking: one process-wide mutex, zd_cm.lock, guards every CM structure,
 * the CM fields of EPs (state transitions, cm_conn, cm_pdata, addresses)
 * and the PSP/RSP/CR objects.  API calls and the thread take it for a whole
 * operation.  It is held while posting connection events and calling the
 * device's qp_connect/qp_flush/qp_reset: EVDs and devices never call back
 * into the CM, so this cannot deadlock.  Lock order: zd_cm.lock before an
 * IA's lock (the thread creates and frees IA children).
 *
 * Lifetime: a socket object (conn or listener) is freed only by the thread,
 * after the epoll batch that may still name it (zombie list), so any thread
 * may close one under the lock.  The thread is started by the first call
 * that needs it and exits by itself after a while with nothing to watch;
 * a forked child starts over (pthread_atfork).
 *
 * No per-IA state is needed (ia->cm stays NULL): an IA's PSPs, RSPs and
 * CRs are IA children freed by zd_teardown, its connections go with its
 * EPs, and where to listen follows from ia->addr and dev->cm_bind_any.
 */
#ifndef ZD_CM_H
#define ZD_CM_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <netinet/in.h>

#include "core/zd_obj.h"
#include "core/zd_cm_wire.h"

struct zd_ia;
struct zd_ep;
struct zd_evd;

/* Timing (nanoseconds unless named otherwise). */
#define ZD_CM_RETRY_MIN_NS        (5ull * 1000 * 1000)     /* refused: first retry */
#define ZD_CM_RETRY_MAX_NS        (100ull * 1000 * 1000)   /* refused: retry backoff cap */
#define ZD_CM_INFINITE_REFUSED_NS (30ull * 1000 * 1000 * 1000) /* nobody listens, no timeout */
#define ZD_CM_WAIT_REQ_NS         (10ull * 1000 * 1000 * 1000) /* accepted socket, no REQ yet */
#define ZD_CM_WAIT_RTU_NS         (60ull * 1000 * 1000 * 1000) /* accepted, no RTU yet */
#define ZD_CM_DISC_NS             (1ull * 1000 * 1000 * 1000)  /* graceful disconnect, no ack */
#define ZD_CM_LINGER_NS           (1ull * 1000 * 1000 * 1000)  /* last frame still unsent */
#define ZD_CM_IDLE_EXIT_NS        (500ull * 1000 * 1000)   /* thread exits when idle */
#define ZD_CM_BACKLOG             4096                     /* pending CRs per PSP */
#define ZD_CM_MAX_WAITING         ZD_CM_BACKLOG            /* sockets without a REQ yet, per listener */
#define ZD_CM_MAX_LISTENERS       4096                     /* per process */
#define ZD_CM_QUERY_MS            250    /* a port's holder answers QUERY (zd_cm_listen) */
#define ZD_CM_MRA_NS              (3000ull * 1000 * 1000)  /* REQ sent, MRA due (zd_cm_wire.h); generous: a requester that gives up on a slow but live CM leaves it a CR nobody will complete */

/* Failure detection on every connected TCP socket of zdapl (the CM's, and
 * the tcp device's data sockets): a peer that vanishes without a FIN or
 * RST (link down, host gone) is declared dead after at most
 * ZD_CM_USER_TIMEOUT_MS of unacknowledged data (TCP_USER_TIMEOUT), or, on
 * an idle socket, after KEEPIDLE + KEEPCNT x KEEPINTVL seconds of
 * unanswered keepalive probes: well under 10 s either way. */
#define ZD_CM_KEEPIDLE_S          2
#define ZD_CM_KEEPINTVL_S         1
#define ZD_CM_KEEPCNT             2
#define ZD_CM_USER_TIMEOUT_MS     4000
/* A device's report of a dead data path waits this long, so a graceful
 * DISC racing the data socket's EOF still ends the EP DISCONNECTED. */
#define ZD_CM_DEV_BROKEN_GRACE_NS (200ull * 1000 * 1000)
/* Frames of carried connections (zd_cm_dev_frame) wait at most this long
 * for the CM sockets' frames that came before them (zd_cm.c). */
#define ZD_CM_REPORT_DEFER_NS     (20ull * 1000 * 1000)

enum zd_cm_sock_kind {
	ZD_CM_SOCK_WAKE,
	ZD_CM_SOCK_LISTENER,
	ZD_CM_SOCK_CONN,
};

/* Common head of what epoll watches. */
struct zd_cm_sock {
	enum zd_cm_sock_kind kind;
	int fd;                          /* -1 once closed */
	int zombie;                      /* closed: freed after the current batch */
	struct zd_cm_sock *zombie_next;
};

struct zd_psp;
struct zd_rsp;
struct zd_cr;
struct zd_cm_peer;

struct zd_cm_listener {
	struct zd_cm_sock sock;
	struct zd_ia *ia;
	struct zd_psp *psp;              /* exactly one of psp and rsp */
	struct zd_rsp *rsp;
	uint64_t qual;                   /* the service point's conn_qual */
	struct in_addr addr;             /* bound to (INADDR_ANY: shm) */
	uint16_t port;                   /* one of qual's probe ports (zd_conn_qual.h) */
	uint32_t pending;                /* CRs not yet accepted or rejected */
	uint32_t waiting;                /* accepted sockets with no REQ yet */
};

enum zd_cm_conn_state {
	ZD_CONN_CONNECTING,      /* active: TCP handshake in progress */
	ZD_CONN_RETRY_WAIT,      /* active: refused, no socket, retry at retry_at */
	ZD_CONN_REQ_SENT,        /* active: waiting for REP or REJ */
	ZD_CONN_WAIT_REQ,        /* passive: accepted socket, waiting for REQ */
	ZD_CONN_CR_PENDING,      /* passive: CR given to the consumer */
	ZD_CONN_PEER_GONE,       /* passive: CR pending, the requester went away */
	ZD_CONN_REP_SENT,        /* passive: accepted, waiting for RTU */
	ZD_CONN_ESTABLISHED,
	ZD_CONN_DISC_SENT,       /* graceful disconnect, waiting for DISC_ACK or EOF */
	ZD_CONN_CLOSING,         /* flushing a last frame, then closed */
};

struct zd_cm_conn {
	struct zd_cm_sock sock;
	enum zd_cm_conn_state state;
	struct zd_cm_conn *prev, *next;  /* zd_cm.conns */
	/* Never reused within the process, unlike the conn's memory and its
	 * EP: a report about a connection cannot hit a later one. */
	uint64_t serial;
	struct zd_ep *ep;                /* the EP it connects (active; passive after accept) */
	struct zd_cr *cr;                /* passive: the CR while the consumer decides */
	struct zd_cm_listener *listener; /* passive: where it arrived, while open */
	struct zd_cm_listener *waits_on; /* passive: counted in its waiting, no REQ yet */
	/* The IA it serves, for the IA's CM counters (zd_counters.h): set
	 * with its EP or listener, NULL once it closes or nothing of that IA
	 * holds it any more (the IA may be gone). */
	struct zd_ia *ia;
	struct sockaddr_in peer;         /* active: target; passive: requester */
	uint64_t conn_qual;
	unsigned probe;                  /* active: peer.sin_port is probe #probe of conn_qual */
	int reached;                     /* active: MRA came, the REQ reached its service point */
	int refused;                     /* active: at least one attempt refused */
	int ud;                          /* a UD address exchange (zd_ud_cm.c) */
	uint64_t deadline;               /* 0: none; see zd_cm_conn_timeout */
	uint64_t connect_deadline;       /* active: the consumer's timeout (0: none) */
	uint64_t give_up;                /* active: refused attempts stop here */
	uint64_t retry_at, retry_delay;
	size_t req_len;                  /* active: REQ frame, resent on every attempt */
	uint8_t req[ZD_CM_FRAME_MAX];
	size_t rx_len;
	uint8_t rx[ZD_CM_FRAME_MAX];
	size_t tx_len;
	uint8_t tx[2 * ZD_CM_FRAME_MAX];
	uint16_t peer_blob_len;
	uint8_t peer_blob[ZD_QP_BLOB_MAX];
	/* Liveness (zd_cm_liveness.h): the peer process it reaches, while
	 * established, and when a frame last came. */
	struct zd_cm_peer *peer_proc;
	struct zd_cm_conn *peer_prev, *peer_next;
	uint64_t last_rx;
	/* Carried: the device took the socket at ESTABLISHED (qp_carry, fd
	 * -1 here): frames go through qp_cm_send, come from zd_cm_dev_frame;
	 * found by serial in a table (carried_next) until it closes. */
	int carried;
	struct zd_cm_conn *carried_next;
};

struct zd_cm {
	pthread_mutex_t lock;
	int epfd;
	struct zd_cm_sock wake;          /* eventfd: deadlines changed, stop */
	int running;
	unsigned live;                   /* open listeners and conns */
	uint64_t idle_since;
	struct zd_cm_conn conns;         /* list head */
	struct zd_cm_sock *zombies;
};

extern struct zd_cm zd_cm;

/* ---- service points and connection requests (objects) ---- */

struct zd_psp {
	struct zd_obj obj;
	DAT_CONN_QUAL conn_qual;
	struct zd_evd *evd;
	DAT_PSP_FLAGS flags;
	struct zd_cm_listener *listener;
};
ZD_OBJ_FITS(PSP, struct zd_psp);

struct zd_rsp {
	struct zd_obj obj;
	DAT_CONN_QUAL conn_qual;
	struct zd_evd *evd;
	struct zd_ep *ep;                /* reserved, referenced; NULL once used */
	struct zd_cm_listener *listener;
};
ZD_OBJ_FITS(RSP, struct zd_rsp);

struct zd_cr {
	struct zd_obj obj;
	struct zd_cm_conn *conn;
	struct zd_ep *local_ep;          /* RSP's or provider-created EP, referenced */
	int local_ep_ours;               /* created for a DAT_PSP_PROVIDER_FLAG PSP */
	DAT_CONN_QUAL conn_qual;         /* of the service point */
	struct sockaddr_in remote_addr;
	DAT_PORT_QUAL remote_port_qual;
	int ud;                          /* the requester is a UD QP */
	DAT_COUNT pdata_len;
	uint8_t pdata[ZD_CM_PDATA_MAX];
};
ZD_OBJ_FITS(CR, struct zd_cr);

/* ---- zd_cm.c: the thread and its sockets (all with zd_cm.lock held) ---- */

/* Largest private data a connection of @ia carries: the device's limit,
 * within what the wire and the CR/EP buffers hold. */
DAT_COUNT zd_cm_pdata_max(const struct zd_ia *ia);

static inline void zd_cm_lock(void) { pthread_mutex_lock(&zd_cm.lock); }
static inline void zd_cm_unlock(void) { pthread_mutex_unlock(&zd_cm.lock); }

uint64_t zd_cm_now(void);
/* Makes sure the thread runs; 0 or -1. */
int zd_cm_start(void);
/* Makes the thread recompute its timeout. */
void zd_cm_kick(void);

/* Listens for @qual at @ia's CM address, on the first of its probe ports
 * that is free and not preceded by a service point of the same qualifier
 * (zd_conn_qual.h); @any: for a qualifier nobody serves, which it picks
 * (dat_psp_create_any).  DAT_CONN_QUAL_IN_USE when that qualifier is
 * served already at this address or all its ports are taken.  Called with
 * zd_cm.lock held; drops it while asking a port's holder in another
 * process which qualifier it serves. */
DAT_RETURN zd_cm_listen(struct zd_ia *ia, uint64_t qual, bool any, struct zd_cm_listener **out);
void zd_cm_listener_close(struct zd_cm_listener *l);

/* Starts an active connection of @ep (state already ACTIVE_CONNECTION_PENDING). */
DAT_RETURN zd_cm_connect(struct zd_ep *ep, const struct sockaddr_in *dst, uint64_t conn_qual,
			 DAT_TIMEOUT timeout_us, const void *pdata, size_t pdata_len);

/* Queues one frame and tries to send it at once. */
void zd_cm_conn_send(struct zd_cm_conn *c, enum zd_cm_msg_type type, uint16_t reason,
		     const void *pdata, size_t pdata_len, const void *blob, size_t blob_len);
/* Closes now (unsent bytes are lost). */
void zd_cm_conn_close(struct zd_cm_conn *c);
/* Closes once the queued frames are out (bounded by ZD_CM_LINGER_NS). */
void zd_cm_conn_close_after_flush(struct zd_cm_conn *c);

/* Sets the failure-detection options above on a connected socket. */
void zd_cm_sock_keepalive(int fd);

/* Device -> CM: the data path of @ep died while its CM connection may
 * still stand (the device's own socket failed).  Callable from any thread,
 * with device locks held (it takes no CM lock: the CM thread acts on it
 * later, after ZD_CM_DEV_BROKEN_GRACE_NS).  If @ep is still on the
 * connection it had when this was called, the CM ends it as if its own
 * socket had failed: DAT_CONNECTION_EVENT_BROKEN (DISCONNECTED if a
 * graceful disconnect was under way) once, QP flushed, and the peer sees
 * the CM connection close. */
void zd_cm_dev_broken(struct zd_ep *ep);

/* Device -> CM, for a carried connection (qp_carry): the peer's CM frame
 * @type (DISC, DISC_ACK, PING, PONG; its header's conn_qual @id) came on
 * @ep's data stream, or, @type ZD_CM_DEV_END, the stream ended (EOF, an
 * error, a violation).  Callable from any thread with device locks held;
 * the CM thread handles them in the order they were reported, as frames
 * read from its own socket (an end: at once, as its own socket's EOF; a
 * DISC before it was reported first). */
#define ZD_CM_DEV_END 0
void zd_cm_dev_frame(struct zd_ep *ep, unsigned type, uint64_t id);

/* @c (ESTABLISHED, RC, its last frame out) offers its socket to the
 * device (qp_carry): 1 carried, 0 kept, -1 failed (the caller ends it). */
int zd_cm_conn_carry(struct zd_cm_conn *c);

/* ---- zd_ep_cm.c: EP side of the state machine ---- */

/* Posts a connection event of @type on @ep's connect EVD; @pdata is copied
 * into the EP so the event's pointer stays valid until the next one. */
void zd_cm_ep_event(struct zd_ep *ep, DAT_EVENT_NUMBER type, const void *pdata, size_t len);
/* The connection of @ep ended (@type: DISCONNECTED, BROKEN, ...): QP flushed,
 * EP DISCONNECTED, event posted, conn detached (not closed). */
void zd_cm_ep_conn_lost(struct zd_ep *ep, DAT_EVENT_NUMBER type);
/* Detaches @ep from the CM for dat_ep_free (no events). */
void zd_cm_ep_release(struct zd_ep *ep);
/* The device joins @ep's QP to the peer's (its blob); a failure is told
 * on stderr, where the connection's events cannot say why. */
DAT_RETURN zd_cm_qp_connect(struct zd_ep *ep, const void *blob, size_t len);

/* Frame handlers the thread calls (zd_ep_cm.c). */
void zd_cm_active_on_rep(struct zd_cm_conn *c, const struct zd_cm_hdr *h, const uint8_t *body);
void zd_cm_active_on_rej(struct zd_cm_conn *c, const struct zd_cm_hdr *h, const uint8_t *body);
/* An active connect failed before it was established. */
void zd_cm_active_failed(struct zd_cm_conn *c, DAT_EVENT_NUMBER type);

/* ---- zd_ud_cm.c: UD address exchanges (c->ud) ---- */
void zd_cm_ud_on_rep(struct zd_cm_conn *c, const struct zd_cm_hdr *h, const uint8_t *body);
void zd_cm_ud_on_rtu(struct zd_cm_conn *c);
void zd_cm_ud_on_rej(struct zd_cm_conn *c, const struct zd_cm_hdr *h, const uint8_t *body);
/* Failed before its end (refused, timed out, socket lost). */
void zd_cm_ud_failed(struct zd_cm_conn *c);
/* dat_cr_accept of a UD request by UD EP @ep: REP with its address. */
DAT_RETURN zd_cm_ud_accept_locked(struct zd_cm_conn *c, struct zd_ep *ep, const void *pdata,
				  size_t pdata_len);
/* dat_ep_free: the EP's exchanges under way end without events. */
void zd_cm_ud_ep_release(struct zd_ep *ep);

/* ---- zd_cr.c ---- */

/* A REQ arrived on @c (state WAIT_REQ): make a CR and tell the consumer. */
void zd_cm_passive_on_req(struct zd_cm_conn *c, const struct zd_cm_hdr *h, const uint8_t *body);
/* A QUERY, or a REQ for another qualifier, on a listener: REJ(QUAL_HERE)
 * if it serves h->conn_qual, REJ(NO_QUAL) otherwise; then closes. */
void zd_cm_passive_on_query(struct zd_cm_conn *c, const struct zd_cm_hdr *h);
/* Frees an RSP; a reserved EP goes back to UNCONNECTED (zd_rsp.c). */
void zd_rsp_destroy_locked(struct zd_rsp *rsp);
/* A request arrived on the RSP: its EP passes to the CR, it stops
 * listening and stays, used, until dat_rsp_free (zd_rsp.c). */
void zd_rsp_use_locked(struct zd_rsp *rsp);

/* ---- teardown (dat_ia_close ABRUPT) ---- */
void zd_psp_destroy(struct zd_obj *o);
void zd_rsp_destroy(struct zd_obj *o);
void zd_cr_destroy(struct zd_obj *o);

#endif /* ZD_CM_H */
