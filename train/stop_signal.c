#include "train/stop_signal.h"

#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t stop_signal;

static void on_stop_signal(int sig) {
    if (stop_signal && sig == SIGINT) {
        static const char msg[] = "\ngdp: second interrupt: stopping now, without a checkpoint\n";
        ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
        (void)w;
        signal(SIGINT, SIG_DFL);
        raise(SIGINT);
        return;
    }
    static const char term[] = "\ngdp: SIGTERM: finishing this step, then a checkpoint and exit\n";
    static const char intr[] = "\ngdp: SIGINT: finishing this step, then a checkpoint and exit (interrupt again to "
                               "stop at once)\n";
    static const char usr1[] = "\ngdp: SIGUSR1: finishing this step, then a checkpoint and exit\n";
    const char *m = sig == SIGTERM ? term : sig == SIGINT ? intr : usr1;
    size_t n = sig == SIGTERM ? sizeof term - 1 : sig == SIGINT ? sizeof intr - 1 : sizeof usr1 - 1;
    if (!stop_signal) {
        ssize_t w = write(STDERR_FILENO, m, n);
        (void)w;
    }
    stop_signal = sig;
}

static const int STOP_SIGNALS[3] = {SIGTERM, SIGINT, SIGUSR1};

void stop_signals_install(StopSignals *s) {
    stop_signal = 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESTART; /* data reads and MPI calls go on through the signal */
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < 3; i++) sigaction(STOP_SIGNALS[i], &sa, &s->saved[i]);
    sa.sa_handler = SIG_IGN;
    sigaction(SIGXFSZ, &sa, &s->saved[3]);
}

void stop_signals_restore(const StopSignals *s) {
    for (int i = 0; i < 3; i++) sigaction(STOP_SIGNALS[i], &s->saved[i], NULL);
    sigaction(SIGXFSZ, &s->saved[3], NULL);
}

int stop_signal_received(void) { return stop_signal; }

const char *stop_signal_name(int sig) {
    return sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : sig == SIGUSR1 ? "SIGUSR1" : "a signal";
}
