/*
 * Liveness of connected peers: a process stopped with SIGSTOP (or held in
 * a debugger, or starved) keeps its sockets open, its kernel ACKs and
 * answers keepalives, so neither EOF nor TCP_USER_TIMEOUT ever ends its
 * connections.  The CM threads check each other instead, per peer
 * PROCESS, not per connection:
 *
 *  - every CM has a random 64-bit instance id (new after fork), which it
 *    sends in REP and RTU (zd_cm_wire.h), so each side of an established
 *    connection knows which process it reaches;
 *  - established connections are grouped by (peer address, peer id); any
 *    frame received on a member proves the whole group alive;
 *  - a group silent for I = ZDAPL_PEER_TIMEOUT_MS / 3 gets one PING on
 *    one member (the peer's CM answers PONG; the PING also tells the peer
 *    that we are alive); silent for 2 I, a PING on every member; a member
 *    still silent I after that is lost: DAT_CONNECTION_EVENT_BROKEN, its
 *    DTOs flushed, its CM socket closed.  A hung peer is so declared dead
 *    between ZDAPL_PEER_TIMEOUT_MS and that plus one CM wake-up after the
 *    last frame it sent.
 *
 * An idle connection costs nothing of its own: no timer, no frame; a
 * group costs one PING + PONG per I while no other frame flows.  The
 * all-member round only runs on a silent group, and breaks only members
 * that stayed silent, so a peer that claims another process's id cannot
 * get that process's connections broken.  A peer whose REP/RTU carried no
 * id (0) is a group of its own.
 *
 * All functions run with zd_cm.lock held, on the CM thread or an API call.
 */
#ifndef ZD_CM_LIVENESS_H
#define ZD_CM_LIVENESS_H

#include <stdint.h>

struct zd_cm_conn;

#define ZD_CM_PEER_TIMEOUT_MS_DEFAULT 30000

/* This process's CM instance id (never 0). */
uint64_t zd_cm_liveness_self(void);

/* The detection bound in ns (ZDAPL_PEER_TIMEOUT_MS; 0: checks off). */
uint64_t zd_cm_liveness_timeout_ns(void);

/* @c just became ESTABLISHED; @peer_id came in the peer's REP or RTU. */
void zd_cm_liveness_join(struct zd_cm_conn *c, uint64_t peer_id, uint64_t now);

/* A frame arrived on @c (any state). */
void zd_cm_liveness_heard(struct zd_cm_conn *c, uint64_t now);

/* @c leaves its group (detached from its EP, closing). */
void zd_cm_liveness_leave(struct zd_cm_conn *c);

/* Sends the PINGs that are due and calls @lost on each member found dead;
 * returns when it next has work (UINT64_MAX: none). */
uint64_t zd_cm_liveness_run(uint64_t now, void (*lost)(struct zd_cm_conn *c));

/* A forked child: new id, no groups (its connections are the parent's). */
void zd_cm_liveness_atfork_child(void);

#endif /* ZD_CM_LIVENESS_H */
