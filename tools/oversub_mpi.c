/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * oversub_mpi: the MPI library's own transport beside zd_eager_ring under
 * oversubscription (tools/oversub.sh).  Ranks pair up (0-1, 2-3, ...) and
 * every pair runs the same test at once, each rank busy-polling inside MPI:
 *
 *   oversub_mpi pingpong <bytes> <iters>   one-way latency (RTT / 2), usec
 *   oversub_mpi stream <bytes> <iters>     even rank streams, odd rank
 *                                          receives; MB/s (2^20) and msg/s
 *
 * Rank 0 prints one line per pair: "pair <p> <mode> <bytes> <value>", the
 * pingpong's average one-way usec or the stream's MB/s, then its msg/s.
 * Not part of the build (tools/oversub.sh compiles it with mpicc when MPICH
 * is installed).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STREAM_WINDOW 64

int main(int argc, char **argv)
{
	int rank, size;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (argc != 4 || size % 2) {
		if (rank == 0)
			fprintf(stderr, "usage: oversub_mpi pingpong|stream <bytes> <iters> "
				"(an even number of ranks)\n");
		MPI_Finalize();
		return 2;
	}
	int stream = strcmp(argv[1], "stream") == 0;
	long bytes = atol(argv[2]), iters = atol(argv[3]);
	int peer = rank ^ 1, sender = (rank & 1) == 0;
	char *buf = malloc((size_t)bytes * STREAM_WINDOW + 1);
	MPI_Request req[STREAM_WINDOW];
	MPI_Status st[STREAM_WINDOW];
	double t0, t, res[2] = { 0, 0 };

	memset(buf, rank, (size_t)bytes * STREAM_WINDOW + 1);
	/* a few warm-up exchanges, then every pair starts together */
	for (int i = 0; i < 10; i++) {
		if (sender) {
			MPI_Send(buf, (int)bytes, MPI_CHAR, peer, 0, MPI_COMM_WORLD);
			MPI_Recv(buf, (int)bytes, MPI_CHAR, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		} else {
			MPI_Recv(buf, (int)bytes, MPI_CHAR, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			MPI_Send(buf, (int)bytes, MPI_CHAR, peer, 0, MPI_COMM_WORLD);
		}
	}
	MPI_Barrier(MPI_COMM_WORLD);
	t0 = MPI_Wtime();
	if (!stream) {
		for (long i = 0; i < iters; i++) {
			if (sender) {
				MPI_Send(buf, (int)bytes, MPI_CHAR, peer, 1, MPI_COMM_WORLD);
				MPI_Recv(buf, (int)bytes, MPI_CHAR, peer, 1, MPI_COMM_WORLD,
					 MPI_STATUS_IGNORE);
			} else {
				MPI_Recv(buf, (int)bytes, MPI_CHAR, peer, 1, MPI_COMM_WORLD,
					 MPI_STATUS_IGNORE);
				MPI_Send(buf, (int)bytes, MPI_CHAR, peer, 1, MPI_COMM_WORLD);
			}
		}
		t = MPI_Wtime() - t0;
		res[0] = t / (double)iters / 2 * 1e6;
		res[1] = (double)iters * 2 / t;
	} else {
		for (long i = 0; i < iters; i += STREAM_WINDOW) {
			int n = (int)(iters - i < STREAM_WINDOW ? iters - i : STREAM_WINDOW);

			for (int k = 0; k < n; k++) {
				char *b = buf + (size_t)k * (size_t)bytes;

				if (sender)
					MPI_Isend(b, (int)bytes, MPI_CHAR, peer, 2, MPI_COMM_WORLD, &req[k]);
				else
					MPI_Irecv(b, (int)bytes, MPI_CHAR, peer, 2, MPI_COMM_WORLD, &req[k]);
			}
			MPI_Waitall(n, req, st);
		}
		/* the receiver's last byte is in: one ack */
		if (sender)
			MPI_Recv(buf, 1, MPI_CHAR, peer, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		else
			MPI_Send(buf, 1, MPI_CHAR, peer, 3, MPI_COMM_WORLD);
		t = MPI_Wtime() - t0;
		res[0] = (double)iters * (double)bytes / t / 1048576.0;
		res[1] = (double)iters / t;
	}
	if (rank == 0) {
		for (int p = 0; p < size / 2; p++) {
			if (p)
				MPI_Recv(res, 2, MPI_DOUBLE, 2 * p, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			printf("pair %d %s %ld %.3f %.0f\n", p, argv[1], bytes, res[0], res[1]);
		}
	} else if (sender) {
		MPI_Send(res, 2, MPI_DOUBLE, 0, 4, MPI_COMM_WORLD);
	}
	fflush(stdout);
	free(buf);
	MPI_Barrier(MPI_COMM_WORLD);
	MPI_Finalize();
	return 0;
}
