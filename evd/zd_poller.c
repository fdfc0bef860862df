/* Pinned pollers (see zd_poller.h). */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/zd_log.h"      /* base, as zd_compiler.h is (zd_log.h) */
#include "evd/zd_evd.h"
#include "evd/zd_poller.h"
#include "evd/zd_ring_arch.h"
#include "evd/zd_waiter.h"

#define ZD_POLLERS_MAX   64
#define ZD_POLLER_SPIN   2048    /* empty sweeps spun before yielding */
#define ZD_POLLER_YIELD  64      /* then sched_yield()s before sleeping */
#define ZD_POLLER_NAP_NS 1000    /* first sleep; doubles up to ... */
#define ZD_POLLER_NAP_MAX_NS 50000

/* A poller's EVDs: copy-on-write, swapped under p->lock. */
struct zd_poll_list {
	unsigned n;
	struct zd_evd *evd[];
};

struct zd_poller {
	/* the poller's line */
	alignas(ZD_CACHE_LINE) _Atomic uint32_t seq;   /* odd: inside a sweep */
	struct zd_poll_list *_Atomic list;
	_Atomic unsigned nevd;                           /* list->n, for the idle check */
	_Atomic int stop;
	/* control path */
	alignas(ZD_CACHE_LINE) pthread_mutex_t lock;
	struct zd_waiter idle;                           /* no EVD: sleeps here */
	pthread_t thread;
	int cpu;
	_Atomic int go;                                  /* pinned: start */
};

static pthread_mutex_t pollers_lock = PTHREAD_MUTEX_INITIALIZER;
static struct zd_poller *pollers;
static int npollers;
static int ia_users;                 /* open IAs (zd_pollers_get/put) */
static _Atomic int pollers_running;
static _Atomic unsigned pollers_rr;

int zd_pollers_on(void)
{
	return atomic_load_explicit(&pollers_running, memory_order_acquire);
}

/* One EVD, once.  Returns the events it published. */
static int poll_evd(struct zd_evd *evd)
{
	int n = 0, room;

	/* Enter the ring as zd_evd_cq_post_direct does (zd_evd_cq.h has the
	 * Dekker argument): seq_cst RMW, then seq_cst load of direct_off,
	 * which is also acquire against zd_evd_resize_ring's release clearing it,
	 * so evd->ring read below is the new ring. */
	atomic_fetch_add_explicit(&evd->direct_users, 1, memory_order_seq_cst);
	if (ZD_LIKELY(!atomic_load_explicit(&evd->direct_off, memory_order_seq_cst))) {
		room = zd_evd_room(evd);
		if (ZD_LIKELY(room > 0))
			n = evd->dev_poll(evd, room);
	}
	/* release: dat_evd_resize's acquire load sees our slots published. */
	atomic_fetch_sub_explicit(&evd->direct_users, 1, memory_order_release);
	if (n > 0)
		zd_evd_wake(evd);
	return n > 0 ? n : 0;
}

static void nap(long ns)
{
	struct timespec ts = { 0, ns };

	nanosleep(&ts, NULL);
}

static void *poller_main(void *arg)
{
	struct zd_poller *p = arg;
	unsigned idle = 0;
	long nap_ns = ZD_POLLER_NAP_NS;

	while (!atomic_load_explicit(&p->go, memory_order_acquire))
		sched_yield();
	while (!atomic_load_explicit(&p->stop, memory_order_relaxed)) {
		struct zd_poll_list *l;
		unsigned nevd = 0;
		int n = 0;

		/* Inside a sweep (odd).  seq_cst RMW, then a seq_cst load of
		 * the list: Dekker against zd_poller_del's exchange of the
		 * list and load of seq.  Either we load its new list, or it
		 * sees us inside and waits for our release leaving. */
		atomic_fetch_add_explicit(&p->seq, 1, memory_order_seq_cst);
		l = atomic_load_explicit(&p->list, memory_order_seq_cst);
		if (l) {
			nevd = l->n;
			for (unsigned i = 0; i < nevd; i++)
				n += poll_evd(l->evd[i]);
		}
		/* release: our reads of the EVDs and their CQs are done. */
		atomic_fetch_add_explicit(&p->seq, 1, memory_order_release);

		if (n) {
			idle = 0;
			nap_ns = ZD_POLLER_NAP_NS;
			continue;
		}
		if (nevd == 0) {
			/* Nothing to poll: block until zd_poller_add (or stop).
			 * Outside a sweep the list may be freed: only the count
			 * is read (seq_cst: after the announce, Dekker with the
			 * adder's store of it before its notify). */
			uint32_t t = zd_waiter_prepare(&p->idle);

			if (atomic_load_explicit(&p->nevd, memory_order_seq_cst) ||
			    atomic_load(&p->stop))
				zd_waiter_cancel(&p->idle);
			else
				zd_waiter_wait(&p->idle, t, ZD_WAIT_INFINITE);
			continue;
		}
		idle++;
		if (idle < ZD_POLLER_SPIN) {
			zd_cpu_relax();
		} else if (idle < ZD_POLLER_SPIN + ZD_POLLER_YIELD) {
			sched_yield();
		} else {
			nap(nap_ns);
			nap_ns = nap_ns * 2 > ZD_POLLER_NAP_MAX_NS ? ZD_POLLER_NAP_MAX_NS : nap_ns * 2;
		}
	}
	return NULL;
}

/* Ends @p's thread.  Its list, lock and waiter stay: an EVD freed after
 * this (an exit that runs our destructor first) still unlists itself. */
static void poller_stop(struct zd_poller *p)
{
	atomic_store(&p->stop, 1);
	atomic_store_explicit(&p->go, 1, memory_order_release);
	zd_waiter_notify_all(&p->idle);
	pthread_join(p->thread, NULL);
}

/* "2,3", "1", "0-3,6": CPUs into @cpus (no duplicates).  -1 on error. */
static int parse_cpus(const char *s, int *cpus, int max)
{
	int n = 0;
	const char *p = s;

	for (;;) {
		char *end;
		long a, b;

		while (*p == ' ')
			p++;
		if (*p < '0' || *p > '9')
			return -1;
		errno = 0;
		a = strtol(p, &end, 10);
		b = a;
		p = end;
		if (*p == '-') {
			p++;
			if (*p < '0' || *p > '9')
				return -1;
			b = strtol(p, &end, 10);
			p = end;
		}
		if (errno || a < 0 || b < a || b >= CPU_SETSIZE)
			return -1;
		for (long c = a; c <= b; c++) {
			for (int i = 0; i < n; i++)
				if (cpus[i] == c)
					return -1;
			if (n == max)
				return -1;
			cpus[n++] = (int)c;
		}
		while (*p == ' ')
			p++;
		if (*p == '\0')
			return n;
		if (*p != ',')
			return -1;
		p++;
	}
}

/* A forked child has none of the parent's threads: it forgets the
 * pollers (its first dat_ia_open starts its own).  EVDs it inherited still
 * name a parent's poller: that copy reads as idle (seq even, lock fresh),
 * so freeing them only edits its list. */
static void pollers_atfork_child(void)
{
	for (int i = 0; i < npollers; i++) {
		atomic_store(&pollers[i].seq, 0);
		pthread_mutex_init(&pollers[i].lock, NULL);
	}
	pollers = NULL;
	npollers = 0;
	ia_users = 0;
	atomic_store(&pollers_running, 0);
	pthread_mutex_init(&pollers_lock, NULL);
}

/* Starts the pollers ZDAPL_POLLERS names (pollers_lock held). */
static DAT_RETURN pollers_start(void)
{
	static int atfork_done;
	const char *env = getenv("ZDAPL_POLLERS");
	int cpus[ZD_POLLERS_MAX], n, started = 0;
	struct zd_poller *ps;
	DAT_RETURN ret = DAT_SUCCESS;

	if (!env || env[strspn(env, " ")] == '\0')
		return DAT_SUCCESS;
	n = parse_cpus(env, cpus, ZD_POLLERS_MAX);
	if (n <= 0) {
		zd_log_error("ZDAPL_POLLERS=\"%s\": expected a list of CPU numbers such as "
			     "\"2,3\" or \"0-1\" (at most %d, no repeats)", env, ZD_POLLERS_MAX);
		ret = DAT_ERROR(DAT_INVALID_PARAMETER, DAT_NO_SUBTYPE);
		goto out;
	}
	ps = calloc((size_t)n, sizeof(*ps));
	if (!ps) {
		ret = DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_RESOURCE_MEMORY);
		goto out;
	}
	for (int i = 0; i < n; i++) {
		struct zd_poller *p = &ps[i];
		cpu_set_t set;
		char name[16];
		int rc;

		p->cpu = cpus[i];
		pthread_mutex_init(&p->lock, NULL);
		zd_waiter_init(&p->idle, 0);
		rc = pthread_create(&p->thread, NULL, poller_main, p);
		if (rc != 0) {
			zd_waiter_fini(&p->idle);
			pthread_mutex_destroy(&p->lock);
			zd_log_error("ZDAPL_POLLERS: cannot start the poller of CPU %d: %s",
				     p->cpu, strerror(rc));
			ret = DAT_ERROR(DAT_INSUFFICIENT_RESOURCES, DAT_NO_SUBTYPE);
			break;
		}
		started++;
		/* Pinned before it polls anything (it waits for go). */
		CPU_ZERO(&set);
		CPU_SET(p->cpu, &set);
		rc = pthread_setaffinity_np(p->thread, sizeof(set), &set);
		if (rc != 0) {
			zd_log_error("ZDAPL_POLLERS=\"%s\": cannot pin a poller to CPU %d (%s: "
				     "no such CPU, offline, or outside this process's affinity)",
				     env, p->cpu, strerror(rc));
			ret = DAT_ERROR(DAT_INVALID_PARAMETER, DAT_NO_SUBTYPE);
			break;
		}
		snprintf(name, sizeof(name), "zd-poll-%d", p->cpu);
		pthread_setname_np(p->thread, name);
		atomic_store_explicit(&p->go, 1, memory_order_release);
	}
	if (ret != DAT_SUCCESS) {
		for (int i = 0; i < started; i++) {
			poller_stop(&ps[i]);
			zd_waiter_fini(&ps[i].idle);
			pthread_mutex_destroy(&ps[i].lock);
		}
		free(ps);
		goto out;
	}
	if (!atfork_done && pthread_atfork(NULL, NULL, pollers_atfork_child) == 0)
		atfork_done = 1;
	pollers = ps;
	npollers = n;
	atomic_store_explicit(&pollers_running, 1, memory_order_release);
out:
	return ret;
}

DAT_RETURN zd_pollers_get(void)
{
	DAT_RETURN ret = DAT_SUCCESS;

	pthread_mutex_lock(&pollers_lock);
	if (!zd_pollers_on())
		ret = pollers_start();
	if (ret == DAT_SUCCESS)
		ia_users++;
	pthread_mutex_unlock(&pollers_lock);
	return ret;
}

/* The last IA closed: every EVD went with it, no list holds one (if one
 * still did, the pollers stay: its free must find its poller). */
static bool pollers_idle(void)
{
	for (int i = 0; i < npollers; i++)
		if (atomic_load(&pollers[i].nevd))
			return false;
	return true;
}

void zd_pollers_put(void)
{
	pthread_mutex_lock(&pollers_lock);
	if (ia_users > 0 && --ia_users == 0 && zd_pollers_on() && pollers_idle()) {
		atomic_store(&pollers_running, 0);
		for (int i = 0; i < npollers; i++) {
			poller_stop(&pollers[i]);
			free(atomic_load(&pollers[i].list));
			zd_waiter_fini(&pollers[i].idle);
			pthread_mutex_destroy(&pollers[i].lock);
		}
		free(pollers);
		pollers = NULL;
		npollers = 0;
	}
	pthread_mutex_unlock(&pollers_lock);
}

/* At unload (dlclose by libdat2, or exit): no poller may run our code
 * after it is gone.  EVDs still listed are the process's leak. */
__attribute__((destructor)) static void zd_pollers_fini(void)
{
	pthread_mutex_lock(&pollers_lock);
	if (atomic_load(&pollers_running)) {
		atomic_store(&pollers_running, 0);
		for (int i = 0; i < npollers; i++)
			poller_stop(&pollers[i]);
		/* pollers[] stays allocated: see poller_stop. */
	}
	pthread_mutex_unlock(&pollers_lock);
}

static struct zd_poll_list *list_copy(const struct zd_poll_list *old, struct zd_evd *drop,
				      struct zd_evd *add)
{
	unsigned n = old ? old->n : 0, k = 0;
	struct zd_poll_list *l = malloc(sizeof(*l) + (n + 1) * sizeof(l->evd[0]));

	if (!l)
		return NULL;
	for (unsigned i = 0; i < n; i++)
		if (old->evd[i] != drop)
			l->evd[k++] = old->evd[i];
	if (add)
		l->evd[k++] = add;
	l->n = k;
	return l;
}

/* Waits until @p is not inside a sweep that may have loaded a list older
 * than the one just stored (seq_cst, the other half of poller_main's
 * Dekker).  Caller holds p->lock. */
static void poller_sync(struct zd_poller *p)
{
	uint32_t s = atomic_load_explicit(&p->seq, memory_order_seq_cst);

	if (!(s & 1))
		return;
	/* acquire: pairs with the poller's release leaving the sweep. */
	while (atomic_load_explicit(&p->seq, memory_order_acquire) == s)
		sched_yield();
}

void zd_poller_add(struct zd_evd *evd)
{
	struct zd_poller *p;
	struct zd_poll_list *old, *fresh;

	if (!zd_pollers_on() || !evd->dev_poll)
		return;
	p = &pollers[atomic_fetch_add(&pollers_rr, 1) % (unsigned)npollers];
	pthread_mutex_lock(&p->lock);
	old = atomic_load(&p->list);
	fresh = list_copy(old, NULL, evd);
	if (!fresh) {
		/* No memory: this EVD keeps manual progress. */
		pthread_mutex_unlock(&p->lock);
		return;
	}
	/* The consumer stops polling before the poller starts: the EVD is
	 * not handed out yet, so nobody polls it right now. */
	evd->cq_poll = NULL;
	zd_evd_set_poll_one(evd, NULL);
	evd->poller = p;
	/* seq_cst (release): the EVD's fields before the poller sees it. */
	atomic_exchange_explicit(&p->list, fresh, memory_order_seq_cst);
	atomic_store_explicit(&p->nevd, fresh->n, memory_order_seq_cst);
	poller_sync(p);
	free(old);
	pthread_mutex_unlock(&p->lock);
	zd_waiter_notify(&p->idle);
}

void zd_poller_del(struct zd_evd *evd)
{
	struct zd_poller *p = evd->poller;
	struct zd_poll_list *old, *fresh;

	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	old = atomic_load(&p->list);
	fresh = list_copy(old, evd, NULL);
	while (!fresh) {
		/* Must not return with the poller still on it. */
		sched_yield();
		fresh = list_copy(old, evd, NULL);
	}
	atomic_exchange_explicit(&p->list, fresh, memory_order_seq_cst);
	atomic_store_explicit(&p->nevd, fresh->n, memory_order_seq_cst);
	poller_sync(p);
	free(old);
	pthread_mutex_unlock(&p->lock);
	evd->poller = NULL;
}
