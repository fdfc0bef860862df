/*
 * Corpus replay for meson test: feeds every file named on the command line
 * (directories: every regular file in them) to the harness's
 * LLVMFuzzerTestOneInput, as libFuzzer does with a corpus, without clang.
 * Fails if it found no input at all: an empty corpus tests nothing.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf = NULL;
	long size;

	if (!f || fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 ||
	    fseek(f, 0, SEEK_SET) != 0) {
		perror(path);
		goto err;
	}
	/* an exact-size copy: a read past the input is an ASan report */
	buf = malloc(size ? (size_t)size : 1);
	if (!buf || fread(buf, 1, (size_t)size, f) != (size_t)size) {
		perror(path);
		goto err;
	}
	fclose(f);
	LLVMFuzzerTestOneInput(buf, (size_t)size);
	free(buf);
	return 0;
err:
	free(buf);
	if (f)
		fclose(f);
	return -1;
}


/* Runs @path (a file, or the files of a directory in name order);
 * returns how many inputs ran, or -1. */
static int run_path(const char *path)
{
	struct stat st;
	struct dirent **ents;
	int n, ran = 0;

	if (stat(path, &st) != 0) {
		perror(path);
		return -1;
	}
	if (!S_ISDIR(st.st_mode))
		return run_file(path) == 0 ? 1 : -1;
	n = scandir(path, &ents, NULL, alphasort);
	if (n < 0) {
		perror(path);
		return -1;
	}
	for (int i = 0; i < n; i++) {
		char full[4096];

		snprintf(full, sizeof(full), "%s/%s", path, ents[i]->d_name);
		if (ents[i]->d_name[0] != '.' && stat(full, &st) == 0 && S_ISREG(st.st_mode)) {
			if (run_file(full) != 0)
				ran = -1;
			else if (ran >= 0)
				ran++;
		}
		free(ents[i]);
	}
	free(ents);
	return ran;
}

int main(int argc, char **argv)
{
	int total = 0;

	for (int i = 1; i < argc; i++) {
		int n = run_path(argv[i]);

		if (n < 0)
			return 1;
		total += n;
	}
	if (total == 0) {
		fprintf(stderr, "no corpus input found\n");
		return 1;
	}
	printf("%d inputs replayed, no crash\n", total);
	return 0;
}
