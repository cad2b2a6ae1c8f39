/* Stop signals: SIGTERM, SIGINT and SIGUSR1 end a training run after the current step, with a
 * checkpoint; a second SIGINT ends it at once. */
#pragma once
#include <signal.h>

typedef struct StopSignals {
    struct sigaction saved[4]; /* the handlers before install: SIGTERM, SIGINT, SIGUSR1, SIGXFSZ */
} StopSignals;

/* Installs the stop handlers and ignores SIGXFSZ, so a file-size limit fails a write with a
 * message instead of killing the process. */
void stop_signals_install(StopSignals *s);
void stop_signals_restore(const StopSignals *s);
/* The stop signal this process received since install, or 0. */
int stop_signal_received(void);
const char *stop_signal_name(int sig);
