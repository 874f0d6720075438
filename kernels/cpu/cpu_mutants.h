/* cpu_mutants.h: deliberately broken variants of the CPU backend, for testing
 * the harness (a checker that cannot tell a mutant from the real backend is
 * not checking anything).
 *
 * Each mutant is a small change inside the real forward/backward code path
 * of kernels/cpu, switched on at run time, and modelled on a class of real
 * bug (/work/shared/research/bug-classes.md). It changes results only in the
 * situations its real-world counterpart does; fa_cpu_mutant_description says
 * which. Id 0 is the correct backend.
 *
 * Selection: fa_cpu_set_mutant(id), or the environment variable
 * FLASHCHECK_CPU_MUTANT=<name or id>, read on the first forward/backward call
 * (an explicit fa_cpu_set_mutant before that wins). The selection is global
 * to the process. */
#ifndef FLASHCHECK_CPU_MUTANTS_H
#define FLASHCHECK_CPU_MUTANTS_H
#ifdef __cplusplus
extern "C" {
#endif

/* Number of ids, including 0 (correct): valid ids are 0 .. count-1. */
int fa_cpu_mutant_count(void);
/* Short name ("causal_off_by_one"), or NULL for an id out of range. Id 0 is "none". */
const char *fa_cpu_mutant_name(int id);
/* One sentence: what is broken and when it shows. NULL for an id out of range. */
const char *fa_cpu_mutant_description(int id);
/* Select a mutant (0 = correct backend). Returns 0, or -1 (and changes
 * nothing) for an id out of range. */
int fa_cpu_set_mutant(int id);
/* The id now selected (reads FLASHCHECK_CPU_MUTANT first if nothing was selected yet). */
int fa_cpu_get_mutant(void);
/* Id of a name or decimal id string; -1 when unknown. */
int fa_cpu_mutant_id(const char *name_or_id);

#ifdef __cplusplus
}
#endif
#endif /* FLASHCHECK_CPU_MUTANTS_H */
