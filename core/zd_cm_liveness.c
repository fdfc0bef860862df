/*
 * Liveness of connected peers, one check per peer process.  See
 * zd_cm_liveness.h.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <sys/random.h>

#include "core/zd_cm.h"
#include "core/zd_cm_liveness.h"
#include "core/zd_log.h"

/* The established connections that reach one peer process. */
struct zd_cm_peer {
	struct zd_cm_peer *next;         /* peers */
	struct in_addr addr;
	uint64_t id;                     /* the peer's CM instance; 0: a group of one */
	struct zd_cm_conn *members;      /* linked by peer_prev/peer_next */
	uint64_t last_rx;                /* last frame from any member */
	uint64_t pinged;                 /* 0, or when one member was pinged */
	uint64_t suspect;                /* 0, or when every member was pinged */
};

static struct zd_cm_peer *peers;
static uint64_t self_id;
static uint64_t timeout_ns = UINT64_MAX;  /* UINT64_MAX: not read yet */

uint64_t zd_cm_liveness_self(void)
{
	while (!self_id) {
		if (getrandom(&self_id, sizeof(self_id), GRND_NONBLOCK) != sizeof(self_id)) {
			struct timespec ts;

			clock_gettime(CLOCK_MONOTONIC, &ts);
			self_id = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ull ^
				  (uint64_t)getpid() << 32 ^ (uint64_t)ts.tv_sec;
		}
	}
	return self_id;
}

uint64_t zd_cm_liveness_timeout_ns(void)
{
	if (timeout_ns == UINT64_MAX) {
		const char *e = getenv("ZDAPL_PEER_TIMEOUT_MS");
		unsigned long long ms = ZD_CM_PEER_TIMEOUT_MS_DEFAULT;

		if (e && *e) {
			char *end;

			errno = 0;
			ms = strtoull(e, &end, 10);
			if (errno || *end || (ms && ms < 3) || ms > 24ull * 3600 * 1000) {
				zd_log_error("ZDAPL_PEER_TIMEOUT_MS=%s: not 0 or 3..86400000 ms, "
					     "using %d",
					     e, ZD_CM_PEER_TIMEOUT_MS_DEFAULT);
				ms = ZD_CM_PEER_TIMEOUT_MS_DEFAULT;
			}
		}
		timeout_ns = ms * 1000000ull;
	}
	return timeout_ns;
}

void zd_cm_liveness_join(struct zd_cm_conn *c, uint64_t peer_id, uint64_t now)
{
	struct zd_cm_peer *g = NULL;

	if (c->peer_proc || !zd_cm_liveness_timeout_ns())
		return;
	if (peer_id)
		for (g = peers; g; g = g->next)
			if (g->id == peer_id && g->addr.s_addr == c->peer.sin_addr.s_addr)
				break;
	if (!g) {
		g = calloc(1, sizeof(*g));
		if (!g)
			return;  /* unwatched: EOF and TCP's timeouts still apply */
		g->addr = c->peer.sin_addr;
		g->id = peer_id;
		g->last_rx = now;
		g->next = peers;
		peers = g;
	}
	c->peer_proc = g;
	c->last_rx = now;
	c->peer_prev = NULL;
	c->peer_next = g->members;
	if (g->members)
		g->members->peer_prev = c;
	g->members = c;
	zd_cm_kick();  /* the thread may have no timer yet */
}

void zd_cm_liveness_heard(struct zd_cm_conn *c, uint64_t now)
{
	struct zd_cm_peer *g = c->peer_proc;

	c->last_rx = now;
	if (g) {
		g->last_rx = now;
		g->pinged = 0;
	}
}

void zd_cm_liveness_leave(struct zd_cm_conn *c)
{
	struct zd_cm_peer *g = c->peer_proc;

	if (!g)
		return;
	if (c->peer_prev)
		c->peer_prev->peer_next = c->peer_next;
	else
		g->members = c->peer_next;
	if (c->peer_next)
		c->peer_next->peer_prev = c->peer_prev;
	c->peer_proc = NULL;
	c->peer_prev = c->peer_next = NULL;
	/* An empty group is freed by zd_cm_liveness_run. */
}

static void ping(struct zd_cm_conn *c)
{
	zd_cm_conn_send(c, ZD_CM_MSG_PING, 0, NULL, 0, NULL, 0);
}

/* The all-member round is over: members silent since it began are lost. */
static void group_judge(struct zd_cm_peer *g, void (*lost)(struct zd_cm_conn *c))
{
	struct zd_cm_conn *m = g->members, *next;
	uint64_t cut = g->suspect;
	unsigned n = 0;

	for (; m; m = next) {
		next = m->peer_next;  /* lost() takes only m out */
		if (m->last_rx < cut) {
			lost(m);
			n++;
		}
	}
	if (n)
		zd_log_error("connection manager: peer process at %s silent for %llu ms: "
			     "%u connection(s) broken (ZDAPL_PEER_TIMEOUT_MS)",
			     inet_ntoa(g->addr), (unsigned long long)(timeout_ns / 1000000), n);
	g->suspect = 0;
	g->pinged = 0;
}

uint64_t zd_cm_liveness_run(uint64_t now, void (*lost)(struct zd_cm_conn *c))
{
	uint64_t next = UINT64_MAX, t = zd_cm_liveness_timeout_ns(), iv = t / 3;
	struct zd_cm_peer **pg = &peers, *g;

	while ((g = *pg)) {
		uint64_t due;

		if (g->suspect && now >= g->suspect + iv)
			group_judge(g, lost);
		if (!g->members) {
			*pg = g->next;
			free(g);
			continue;
		}
		if (!g->suspect && now >= g->last_rx + 2 * iv) {
			for (struct zd_cm_conn *m = g->members; m; m = m->peer_next)
				ping(m);
			g->suspect = now;
		} else if (!g->suspect && !g->pinged && now >= g->last_rx + iv) {
			ping(g->members);
			g->pinged = now;
		}
		due = g->suspect ? g->suspect + iv
		      : g->pinged ? g->last_rx + 2 * iv : g->last_rx + iv;
		if (due < next)
			next = due;
		pg = &g->next;
	}
	return next;
}

void zd_cm_liveness_atfork_child(void)
{
	/* The groups name the parent's connections, which the child only
	 * keeps as zombies (zd_cm.c). */
	while (peers) {
		struct zd_cm_peer *g = peers;

		peers = g->next;
		free(g);
	}
	self_id = 0;
}
