/* cli.h: shared pieces of the `flashcheck` command (prefix cli_).
 *
 * Exit codes (every subcommand):
 *   0  success: certify passed, no new finding, verify PASS, repro did not
 *      reproduce a failure, shrink wrote FILE.min
 *   1  a check failed: certify FAIL or a regression against --baseline, fuzz
 *      found new findings, verify FAIL, repro reproduced the failure, shrink
 *      found that FILE does not fail (nothing to shrink)
 *   2  usage: unknown option, missing or malformed argument (an option's value
 *      missing or replaced by the next option), bad input file (a case file
 *      that is empty, has no shape, or describes an invalid/overflowing problem)
 *   3  backend: the backend could not be loaded or has no device
 *   4  harness error, never a finding: I/O (cannot write the report, a
 *      finding, a JSON file; full or read-only disk), out of memory, a worker
 *      killed from outside, an output directory in use by another run
 * ------------------------------------------------------------------------- */
#ifndef FLASHCHECK_CLI_H
#define FLASHCHECK_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "case/case.h"
#include "kernels/flash_api.h"

enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2, CLI_BACKEND = 3, CLI_INTERNAL = 4, CLI_OVERFLOW = 5 /* verify: only overflow-sensitive NaN/Inf */ };

/* subcommands: argv[0] is the subcommand name */
int cli_certify(int argc, char **argv);
int cli_fuzz(int argc, char **argv);
int cli_repro(int argc, char **argv);
int cli_shrink(int argc, char **argv);
int cli_verify(int argc, char **argv);
int cli_cases(int argc, char **argv);
int cli_inputs(int argc, char **argv);


/* "flashcheck SUB: message" on stderr, plus "run 'flashcheck SUB --help'"; returns CLI_USAGE */
int cli_usage_error(const char *sub, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Option helpers: `--name VALUE` or `--name=VALUE`. When argv[*i] matches name,
 * sets *value (advancing *i past a separate value) and returns 1; returns -1
 * when the value is missing or the next argument is an option ("--..."), which
 * the caller reports as "--name needs a value"; 0 when argv[*i] is another option. */
int cli_opt(int argc, char **argv, int *i, const char *name, const char **value);
/* A path the user typed, resolved where the user stands: under `bazel run` the
 * process runs inside its runfiles tree and BUILD_WORKING_DIRECTORY names the
 * user's directory; a relative path is joined to it. Absolute paths, and runs
 * outside Bazel, are unchanged. The result lives until exit. */
const char *cli_path(const char *p);
/* fuzz/seeds/case of the current directory (a checkout, or runfiles that carry it),
 * else of BUILD_WORKSPACE_DIRECTORY (bazel run); NULL if neither has it. */
const char *cli_seeds_default(void);
/* Lock a report directory for this run (flock on DIR/.flashcheck.lock, held
 * until exit; the file records the holder's pid and start time). Writing that
 * record is also the directory's write probe. 0 locked; 1 another run holds it
 * (msg names it); -1 the directory cannot be written (msg has path and errno). */
int cli_lock_out_dir(const char *dir, char *msg, size_t msglen);
/* strict number parsing: 0 ok, -1 not a number / out of range */
int cli_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out);
int cli_parse_double(const char *s, double *out);

/* Read a whole file (NUL-terminated). NULL with msg on failure. */
char *cli_read_file(const char *path, size_t *len, char *msg, size_t msglen);

/* Load a case file (a repro, a finding, a .min); 0 or -1 with msg naming the line. */
int cli_load_case(const char *path, fc_case *c, char **text_out, char *msg, size_t msglen);

/* Backend name for display (NULL = the default). */
const char *cli_backend_label(const char *name);

#endif /* FLASHCHECK_CLI_H */
