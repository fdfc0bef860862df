/* RDMA write placement order across processes: the last 8 bytes of an
 * RDMA write land after every other byte (hw/soft/zd_soft_copy.h).
 * Consumers poll the end of the target and then read the rest, as they may
 * on verbs hardware: dtest -W -D polls the last byte (it failed here when
 * the kernel's copy, rep movsb in process_vm_writev, or memcpy made the
 * last byte visible first), MPI eager rings poll an 8-byte header word
 * ending the slot, a sequence number whose last byte does not change from
 * one message to the next.  Both sides ping-pong writes of many sizes into
 * the peer's heap buffer (process_vm_writev) and pool buffer (mapped
 * chunk), each waiting for the last byte (mode 0) or for the header word to
 * take the new sequence number (mode 1, aligned and unaligned words), then
 * checking the whole message. */
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>

#include "zd_shm_test.h"

TestSuite(shm_order, .init = t_need_conf, .timeout = 120);

enum { MAXLEN = 65536, ITERS = 1500 };

static const uint32_t sizes[] = { 2, 63, 64, 127, 128, 129, 255, 256, 511, 1024,
				  4095, 4096, 4097, 16384, 65535, 65536 };

struct oinfo {
	char blob[ZD_QP_BLOB_MAX];
	size_t blob_len;
	uint64_t addr[2];  /* receive buffers: heap, pool */
	uint32_t key[2];
};

static unsigned char pat(uint32_t i, int side, uint32_t len)
{
	return (unsigned char)(i * 31u + (unsigned)side * 101u + len);
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* No write from the peer for 10 s (it failed a check): give up. */
static bool gone(double t0)
{
	return now() - t0 > 10.0;
}

/* One side of the ping-pong; side 0 writes first.  Returns 0 or a code. */
/* The 8-byte header word ending a message of @len bytes at @p, read byte
 * by byte (it may be unaligned): any byte of it that changed is enough. */
static uint64_t header_word(const char *p, uint32_t len)
{
	uint64_t w = 0;

	for (int b = 7; b >= 0; b--)
		w = w << 8 | __atomic_load_n((const unsigned char *)p + len - 8 + b, __ATOMIC_RELAXED);
	return w;
}

static int pingpong(struct side *s, DAT_EP_HANDLE ep, int side, int rd, int wr,
		    char *sbuf, DAT_LMR_CONTEXT skey, char *rbuf[2], const struct oinfo *peer)
{
	for (int mode = 0; mode < 2; mode++)
	for (int kind = 0; kind < 2; kind++) {
		for (size_t z = 0; z < sizeof(sizes) / sizeof(sizes[0]); z++) {
			uint32_t len = sizes[z];
			/* mode 1: the last 8 bytes are the polled header word */
			uint32_t body = mode ? len - 8 : len - 1;
			volatile char *last = rbuf[kind] + len - 1;
			char c;

			if (mode == 1 && len < 16)
				continue;

			/* Both receive buffers clean before either writes. */
			memset(rbuf[kind], 0, MAXLEN);
			if (t_pipe_write(wr, "s", 1) || t_pipe_read(rd, &c, 1))
				return 60;
			double t0 = now();

			for (uint32_t i = 1; i <= ITERS; i++) {
				char cnt = (char)(i % 255 + 1);

				for (int turn = 0; turn < 2; turn++) {
					if (turn == side) {
						DAT_LMR_TRIPLET l = t_seg(skey, sbuf, len);
						DAT_RMR_TRIPLET r = t_rseg(peer->key[kind],
							(void *)(uintptr_t)peer->addr[kind], len);
						DAT_DTO_COMPLETION_EVENT_DATA *d;
						DAT_EVENT ev;
						DAT_RETURN ret;

						memset(sbuf, pat(i, side, len), body);
						if (mode) {
							uint64_t h = i;   /* its last byte stays 0 */

							memcpy(sbuf + body, &h, 8);
						} else {
							sbuf[len - 1] = cnt;
						}
						if (dat_ep_post_rdma_write(ep, 1, &l, t_cookie(i), &r,
									   0) != DAT_SUCCESS)
							return 61;
						while ((ret = dat_evd_dequeue(s->req, &ev)) != DAT_SUCCESS)
							if (DAT_GET_TYPE(ret) != DAT_QUEUE_EMPTY)
								return 62;
						d = &ev.event_data.dto_completion_event_data;
						if (d->status != DAT_DTO_SUCCESS)
							return 63;
						if (d->user_cookie.as_64 != i)
							return 66;
					} else {
						unsigned char want = pat(i, !side, len);

						/* Spin (yielding once it takes long: the
						 * peer may wait for this CPU). */
						for (uint64_t n = 1; mode ? header_word(rbuf[kind], len) != i
								     : *last != cnt; n++) {
							if (n > 1000)
								sched_yield();
							if (!(n & 0xffff) && gone(t0)) {
								fprintf(stderr,
									"side %d %s len %u iter %u mode %d: "
									"no new header (last byte 0x%02x)\n",
									side, kind ? "pool" : "heap", len, i,
									mode, (unsigned char)*last);
								return 65;
							}
						}
						t0 = now();
						atomic_thread_fence(memory_order_acquire);
						for (uint32_t b = 0; b < body; b++) {
							if ((unsigned char)rbuf[kind][b] != want) {
								fprintf(stderr,
									"side %d %s len %u iter %u mode %d: byte "
									"%u is 0x%02x, want 0x%02x, tail in\n",
									side, kind ? "pool" : "heap", len, i, mode, b,
									(unsigned char)rbuf[kind][b], want);
								return 64;
							}
						}
					}
				}
			}
		}
	}
	return 0;
}

/* One whole side: IA, buffers, the ping-pong, then the IA closed and the
 * buffers freed.  Returns 0 or a check code. */
static int run_side(int rd, int wr, int side)
{
	struct oinfo me = { 0 }, peer;
	char *sbuf = malloc(MAXLEN);
	char *rbuf[2] = { malloc(MAXLEN), zdapl_mem_alloc(MAXLEN) };
	DAT_LMR_CONTEXT skey, k;
	DAT_EP_HANDLE ep;
	struct side s;
	char c;
	int rc;

	t_open(&s);
	ep = t_ep(&s, NULL);
	t_reg(&s, NULL, sbuf, MAXLEN, DAT_MEM_PRIV_ALL_FLAG, &skey);
	for (int i = 0; i < 2; i++) {
		t_reg(&s, NULL, rbuf[i], MAXLEN, DAT_MEM_PRIV_ALL_FLAG, &k);
		me.addr[i] = (uintptr_t)rbuf[i];
		me.key[i] = k;
	}
	me.blob_len = t_blob(ep, me.blob);
	if (t_pipe_write(wr, &me, sizeof(me)) || t_pipe_read(rd, &peer, sizeof(peer))) {
		rc = 70;
		goto out;
	}
	t_accept_blob(ep, peer.blob, peer.blob_len);
	/* Both connected before the first write. */
	if (t_pipe_write(wr, "c", 1) || t_pipe_read(rd, &c, 1)) {
		rc = 71;
		goto out;
	}
	rc = pingpong(&s, ep, side, rd, wr, sbuf, skey, rbuf, &peer);
	/* Done on both sides before either closes. */
	if (t_pipe_write(wr, rc ? "f" : "d", 1) || t_pipe_read(rd, &c, 1))
		rc = rc ? rc : 72;
	else if (!rc && c != 'd')
		rc = 73;
out:
	t_close(&s);
	free(sbuf);
	free(rbuf[0]);
	zdapl_mem_free(rbuf[1]);
	return rc;
}

Test(shm_order, rdma_write_tail_lands_last)
{
	int rd, wr, status, rc;
	pid_t pid = t_fork_peer(run_side, 1, &rd, &wr);

	rc = run_side(rd, wr, 0);
	if (rc)
		kill(pid, SIGKILL);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert_eq(rc, 0, "this side failed check %d", rc);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "peer status 0x%x", status);
}
