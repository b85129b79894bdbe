/* A gate test fixtures wait at until the test opens it: a hook that blocks
 * "forever" without sleeping, and that the test can release afterwards. */
#ifndef FIXTURE_RELEASE_H
#define FIXTURE_RELEASE_H

#include <curfew.h>
#include <pthread.h>

static pthread_mutex_t release_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t release_cond = PTHREAD_COND_INITIALIZER;
static int released;

/* Opens the gate for every waiter, now and later. */
CURFEW_EXPORT void fixture_release(void) {
    pthread_mutex_lock(&release_lock);
    released = 1;
    pthread_cond_broadcast(&release_cond);
    pthread_mutex_unlock(&release_lock);
}

static void wait_for_release(void) {
    pthread_mutex_lock(&release_lock);
    while (!released) pthread_cond_wait(&release_cond, &release_lock);
    pthread_mutex_unlock(&release_lock);
}

#endif
