//! The executor pagurus runs on (glommio 0.9, vendored with a fix: vendor/README.md) never
//! parks while a task is runnable.
//!
//! glommio 0.9 checks its preempt timer before running the first task queue of a loop. When
//! the timer has already fired (the thread was descheduled for longer than the preempt
//! period, which a loaded machine does all the time), no task runs, the loop takes that for
//! "nothing to do" and parks: a runnable task then waits for an unrelated I/O completion or
//! timer. At start-up there is none, and a core sat for seconds before joining the mesh
//! (issue 16, item 5). A preempt timer of 1 ns makes every loop look preempted.

use std::sync::mpsc;
use std::time::Duration;

use glommio::LocalExecutorBuilder;

#[test]
fn runnable_work_is_run_even_when_the_preempt_timer_has_fired() {
    const RUNS: usize = 1_000;
    let (done, wait_done) = mpsc::channel();
    let worker = std::thread::spawn(move || {
        let executor = LocalExecutorBuilder::default()
            .preempt_timer(Duration::from_nanos(1))
            .make()
            .expect("an executor");
        for run in 0..RUNS {
            let answer = executor.run(async move { run * 2 });
            assert_eq!(answer, run * 2);
        }
        done.send(()).expect("the test waits");
    });
    // Each run takes microseconds; a parked executor never finishes.
    wait_done
        .recv_timeout(Duration::from_secs(30))
        .expect("the executor parked with a runnable task and made no progress");
    worker.join().expect("the worker thread");
}
