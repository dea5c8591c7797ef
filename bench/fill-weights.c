/* Recreates the external weights file of an ONNX model from a fill manifest (written by
 * bench/gpu-models.py): for every slice of every tensor, float32 values uniform with the slice's
 * mean and standard deviation, from a generator seeded by the slice's offset, so the same
 * manifest gives the same bytes on every machine. This lets a model with random weights travel
 * as a few kilobytes (the GPU machine gets the .onnx and the .fill, not hundreds of MB of
 * weights) while keeping each output channel's scale, and so activations of the size a real
 * run has.
 *
 *   fill-weights MODEL.fill...        writes, beside each, the file its first line names
 *
 * Manifest: "placesim-fill 1 FILE NBYTES" and then one "OFFSET COUNT MEAN STD" line per slice
 * (OFFSET in bytes, COUNT float32 values). Exit 0, or 2 with one line naming the manifest and
 * the line that is wrong. Built by tools/gpu-bundle.sh with the C compiler alone. */
#define _GNU_SOURCE
#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int fail(const char *path, long line, const char *what)
{
    fprintf(stderr, "fill-weights: %s:%ld: %s\n", path, line, what);
    return 2;
}

static int fill(const char *path)
{
    FILE *in = fopen(path, "r");
    if (!in) {
        fprintf(stderr, "fill-weights: %s: %s\n", path, strerror(errno));
        return 2;
    }
    char name[4096], line[512];
    unsigned long long total = 0;
    int version = 0;
    if (!fgets(line, sizeof line, in) ||
        sscanf(line, "placesim-fill %d %4095s %llu", &version, name, &total) != 3 ||
        version != 1 || strchr(name, '/')) {
        fclose(in);
        return fail(path, 1, "expected 'placesim-fill 1 FILE NBYTES' (FILE without a folder)");
    }
    char *dirbuf = strdup(path);
    char out_path[8192];
    snprintf(out_path, sizeof out_path, "%s/%s", dirname(dirbuf), name);
    free(dirbuf);
    char tmp_path[8300];
    snprintf(tmp_path, sizeof tmp_path, "%s.tmp", out_path);
    float *buf = calloc(total ? total / 4 + 1 : 1, sizeof(float));
    if (!buf) {
        fclose(in);
        return fail(path, 1, "out of memory");
    }
    long ln = 1;
    int rc = 0;
    while (fgets(line, sizeof line, in)) {
        ln++;
        unsigned long long off, count;
        double mean, sd;
        if (sscanf(line, "%llu %llu %lf %lf", &off, &count, &mean, &sd) != 4 || off % 4 ||
            count > total / 4 || off > total - 4 * count || !isfinite(mean) || !(sd >= 0)) {
            rc = fail(path, ln, "expected 'OFFSET COUNT MEAN STD' inside the file's bytes");
            break;
        }
        uint64_t s = off * 0x2545f4914f6cdd1dull + 1;
        double half = sd * sqrt(3.0); /* uniform on [mean-half, mean+half] has this sd */
        float *dst = buf + off / 4;
        for (unsigned long long i = 0; i < count; i++) {
            double u = (double)(splitmix(&s) >> 11) * (1.0 / 9007199254740992.0);
            dst[i] = (float)(mean + half * (2.0 * u - 1.0));
        }
    }
    fclose(in);
    if (rc == 0) {
        FILE *out = fopen(tmp_path, "wb");
        if (!out || fwrite(buf, 1, total, out) != total || fclose(out) != 0 ||
            rename(tmp_path, out_path) != 0) {
            fprintf(stderr, "fill-weights: %s: cannot write: %s\n", out_path, strerror(errno));
            remove(tmp_path);
            rc = 1;
        }
    }
    free(buf);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help")) {
        fprintf(argc < 2 ? stderr : stdout,
                "Usage: fill-weights MODEL.fill...\n"
                "Writes the external weights file each manifest names (beside it).\n");
        return argc < 2 ? 2 : 0;
    }
    int rc = 0;
    for (int i = 1; i < argc && rc == 0; i++)
        rc = fill(argv[i]);
    return rc;
}
