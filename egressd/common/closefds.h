/*
 * closefds: a new child closes every descriptor it inherited but the ones
 * it keeps, whatever their number: the parent raises its descriptor limit
 * and may hold sockets numbered past 1024 (queued replies, other roles'
 * channels) that no child may inherit.
 */
#ifndef EGRESSD_CLOSEFDS_H
#define EGRESSD_CLOSEFDS_H

#include <stddef.h>

/*
 * Close every descriptor from 3 up but keep[0..n) (any order, negative
 * entries ignored; at most CLOSEFDS_MAX_KEEP of them). 0, or -1 when
 * some could not be closed (close_range failed and so did the loop).
 */
#define CLOSEFDS_MAX_KEEP 32
int closefds_except(const int *keep, size_t n) __attribute__((warn_unused_result));

#endif
