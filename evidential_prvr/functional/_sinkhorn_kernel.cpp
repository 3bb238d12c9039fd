/* Fused Sinkhorn scaling iterations for evidential_prvr (private; built on first use by _sinkhorn_kernel.py
 * with torch.utils.cpp_extension).
 *
 * One call runs `iters` scaling iterations of every problem of a batch and writes the plan. The problems
 * are taken LANES at a time, one per SIMD lane: a group's Gibbs matrices are laid out [n * m][LANES] in a
 * small buffer (built from the log-Gibbs values when `shift` is given), so every step of the iteration is
 * one full-width vector operation with no horizontal reduction, and the group stays in cache for all its
 * iterations. The arithmetic is the eager reference's (evidential_prvr/functional/_sinkhorn_loops.py,
 * eager_scaling), with sums taken in index order:
 *
 *     vt = v / max(v);  u_i = a_i / sum_j K_ij vt_j;  v_j = b_j / sum_i K_ij u_i;  P_ij = (u_i K_ij) v_j
 *
 * starting from v = 1 (or from the u, v passed in when `resume` is set). A lane never reads another, so a
 * problem's result does not depend on the batch it is solved in or on the number of threads; it differs from
 * the eager loop only by the order of the floating-point sums.
 */
#include <math.h>
#include <pthread.h>
#include <stddef.h>

extern "C" {

#define LANES 16

#define DEFINE_SCALING(NAME, T, EXP) \
    static void NAME##_groups(const T *K, const T *shift, const T *a, const T *b, T *u, T *v, T *plan, T *buf, \
                              long first, long last, long batch, long n, long m, long iters, int resume, \
                              int write_plan) { \
        T *G = buf; \
        T *U = G + n * m * LANES; \
        T *A = U + n * LANES; \
        T *V = A + n * LANES; \
        T *Bm = V + m * LANES; \
        T *VT = Bm + m * LANES; \
        T *COL = VT + m * LANES; \
        T vmax[LANES], s[LANES]; \
        for (long g = first; g < last; ++g) { \
            long k0 = g * LANES; \
            long count = batch - k0 < LANES ? batch - k0 : LANES; \
            for (long l = 0; l < LANES; ++l) { /* spare lanes repeat the group's first problem */ \
                long k = k0 + (l < count ? l : 0); \
                const T *Kk = K + k * n * m; \
                if (shift) { \
                    for (long e = 0; e < n * m; ++e) G[e * LANES + l] = EXP(Kk[e] - shift[k]); \
                } else { \
                    for (long e = 0; e < n * m; ++e) G[e * LANES + l] = Kk[e]; \
                } \
                for (long i = 0; i < n; ++i) { \
                    A[i * LANES + l] = a[k * n + i]; \
                    U[i * LANES + l] = resume ? u[k * n + i] : a[k * n + i]; \
                } \
                for (long j = 0; j < m; ++j) { \
                    Bm[j * LANES + l] = b[k * m + j]; \
                    V[j * LANES + l] = resume ? v[k * m + j] : (T)1; \
                } \
            } \
            for (long it = 0; it < iters; ++it) { \
                for (long l = 0; l < LANES; ++l) vmax[l] = V[l]; \
                for (long j = 1; j < m; ++j) { \
                    _Pragma("omp simd") \
                    for (long l = 0; l < LANES; ++l) { \
                        T x = V[j * LANES + l]; \
                        vmax[l] = (x > vmax[l] || x != x) ? x : vmax[l]; \
                    } \
                } \
                for (long j = 0; j < m; ++j) { \
                    _Pragma("omp simd") \
                    for (long l = 0; l < LANES; ++l) VT[j * LANES + l] = V[j * LANES + l] / vmax[l]; \
                } \
                for (long i = 0; i < n; ++i) { \
                    const T *Gi = G + i * m * LANES; \
                    for (long l = 0; l < LANES; ++l) s[l] = (T)0; \
                    for (long j = 0; j < m; ++j) { \
                        _Pragma("omp simd") \
                        for (long l = 0; l < LANES; ++l) s[l] += Gi[j * LANES + l] * VT[j * LANES + l]; \
                    } \
                    _Pragma("omp simd") \
                    for (long l = 0; l < LANES; ++l) U[i * LANES + l] = A[i * LANES + l] / s[l]; \
                } \
                for (long e = 0; e < m * LANES; ++e) COL[e] = (T)0; \
                for (long i = 0; i < n; ++i) { \
                    const T *Gi = G + i * m * LANES; \
                    const T *Ui = U + i * LANES; \
                    for (long j = 0; j < m; ++j) { \
                        _Pragma("omp simd") \
                        for (long l = 0; l < LANES; ++l) COL[j * LANES + l] += Gi[j * LANES + l] * Ui[l]; \
                    } \
                } \
                _Pragma("omp simd") \
                for (long e = 0; e < m * LANES; ++e) V[e] = Bm[e] / COL[e]; \
            } \
            for (long l = 0; l < count; ++l) { \
                long k = k0 + l; \
                for (long i = 0; i < n; ++i) u[k * n + i] = U[i * LANES + l]; \
                for (long j = 0; j < m; ++j) v[k * m + j] = V[j * LANES + l]; \
                if (write_plan) { \
                    T *Pk = plan + k * n * m; \
                    for (long i = 0; i < n; ++i) \
                        for (long j = 0; j < m; ++j) \
                            Pk[i * m + j] = (U[i * LANES + l] * G[(i * m + j) * LANES + l]) * V[j * LANES + l]; \
                } \
            } \
        } \
    }

DEFINE_SCALING(scaling_f32, float, expf)
DEFINE_SCALING(scaling_f64, double, exp)

typedef struct {
    int is_double;
    const void *K, *shift, *a, *b;
    void *u, *v, *plan, *buf;
    long first, last, batch, n, m, iters;
    int resume, write_plan;
} job_t;

static void run_job(const job_t *j) {
    if (j->is_double)
        scaling_f64_groups((const double *)j->K, (const double *)j->shift, (const double *)j->a,
                           (const double *)j->b, (double *)j->u, (double *)j->v, (double *)j->plan,
                           (double *)j->buf, j->first, j->last, j->batch, j->n, j->m, j->iters, j->resume,
                           j->write_plan);
    else
        scaling_f32_groups((const float *)j->K, (const float *)j->shift, (const float *)j->a,
                           (const float *)j->b, (float *)j->u, (float *)j->v, (float *)j->plan,
                           (float *)j->buf, j->first, j->last, j->batch, j->n, j->m, j->iters, j->resume,
                           j->write_plan);
}

static void *thread_main(void *arg) {
    run_job((const job_t *)arg);
    return NULL;
}

#define MAX_THREADS 64

/* The number of buffer elements one thread needs. */
long evidential_prvr_sinkhorn_buffer(long n, long m) { return (n * m + 2 * n + 4 * m) * LANES; }

/* Returns 0 on success. `buf` holds evidential_prvr_sinkhorn_buffer(n, m) elements per thread. Threads split
 * the groups of LANES problems in contiguous ranges. */
int evidential_prvr_sinkhorn_scaling(int is_double, const void *K, const void *shift, const void *a, const void *b,
                                     void *u, void *v, void *plan, void *buf, long batch, long n, long m, long iters,
                                     int resume, int write_plan, int threads) {
    long groups = (batch + LANES - 1) / LANES;
    if (threads < 1) threads = 1;
    if (threads > MAX_THREADS) threads = MAX_THREADS;
    if (threads > groups) threads = (int)groups;
    size_t elem = is_double ? sizeof(double) : sizeof(float);
    size_t per_thread = (size_t)evidential_prvr_sinkhorn_buffer(n, m) * elem;
    job_t jobs[MAX_THREADS];
    pthread_t ids[MAX_THREADS];
    int started[MAX_THREADS];
    for (int t = 0; t < threads; ++t) {
        job_t j = {is_double, K, shift, a, b, u, v, plan, (char *)buf + (size_t)t * per_thread,
                   groups * t / threads, groups * (t + 1) / threads, batch, n, m, iters, resume, write_plan};
        jobs[t] = j;
        started[t] = 0;
    }
    for (int t = 1; t < threads; ++t) started[t] = pthread_create(&ids[t], NULL, thread_main, &jobs[t]) == 0;
    run_job(&jobs[0]);
    for (int t = 1; t < threads; ++t) {
        if (started[t])
            pthread_join(ids[t], NULL);
        else
            run_job(&jobs[t]); /* no thread could be started: run its share here */
    }
    return 0;
}

}  // extern "C"
