//! The executor pagurus runs on (glommio 0.9, vendored with a fix: vendor/README.md) never
//! parks while a task is runnable.
//!
//! glommio 0.9 checks its preempt timer before running the first task queue of a loop. When
//! the timer has already fired (the thread was descheduled for longer than the preempt
//! period, which a loaded machine does all the time), no task runs, the loop takes that for
//! "nothing to do" and parks: a runnable task then waits for an unrelated I/O completion or
//! timer. At start-up there is none, and a core sat for seconds before joining the mesh
//! (issue 16, item 5). A preempt timer of 1 ns makes every loop look preempted.
//!
//! The vendored glommio also keeps its preemption timers armed across turns of the loop
//! instead of cancelling and re-arming them on every turn (vendor/README.md). The other two
//! tests hold what that must not break: a task queue that keeps running is still told to
//! yield, turn after turn, and an executor with nothing to do sleeps instead of spinning.
//!
//! It keeps the user timer a parked executor armed, too, while that one fires no later than
//! the earliest timer due; two tests hold that a timer still fires when a sooner one is made
//! or when the armed one is dropped unfired.
//!
//! Last, an executor about to park announces it with a fence instead of a `membarrier`
//! (vendor/README.md): the last two tests hold that what another thread hands a parking
//! executor always wakes it.
//!
//! The broker's cores poll before they park (`serve --idle-poll-us`); one test holds that an
//! executor doing so still sleeps when it has nothing to do.

use std::sync::mpsc;
use std::time::Duration;

use glommio::{LocalExecutorBuilder, Placement};

/// Runs `work` on an executor of its own thread with the given preempt timer, and fails with
/// `stuck` if it does not finish within `bound` (a parked or never-preempted executor hangs).
fn on_executor<T: Send + 'static>(
    preempt: Duration,
    bound: Duration,
    stuck: &str,
    work: impl FnOnce(&glommio::LocalExecutor) -> T + Send + 'static,
) -> T {
    let (done, wait_done) = mpsc::channel();
    let worker = std::thread::spawn(move || {
        let executor = LocalExecutorBuilder::default()
            .preempt_timer(preempt)
            .make()
            .expect("an executor");
        done.send(work(&executor)).expect("the test waits");
    });
    let answer = wait_done.recv_timeout(bound).expect(stuck);
    worker.join().expect("the worker thread");
    answer
}

/// Busy until the preempt timer fires, then yields.
async fn spin_until_told_to_yield() {
    while !glommio::executor().need_preempt() {
        std::hint::spin_loop();
    }
    glommio::yield_if_needed().await;
}

#[test]
fn runnable_work_is_run_even_when_the_preempt_timer_has_fired() {
    const RUNS: usize = 1_000;
    // Each run takes microseconds; a parked executor never finishes.
    let runs = on_executor(
        Duration::from_nanos(1),
        Duration::from_secs(30),
        "the executor parked with a runnable task and made no progress",
        |executor| {
            (0..RUNS)
                .filter(|&run| executor.run(async move { run * 2 }) == run * 2)
                .count()
        },
    );
    assert_eq!(runs, RUNS);
}

#[test]
fn a_running_task_queue_is_told_to_yield_turn_after_turn() {
    const TURNS: usize = 200;
    // A timer never re-armed after it fired (or never armed) leaves a turn spinning forever.
    let turns = on_executor(
        Duration::from_millis(1),
        Duration::from_secs(60),
        "a running task queue was never told to yield",
        |executor| {
            executor.run(async {
                let mut turns = 0;
                for _ in 0..TURNS {
                    spin_until_told_to_yield().await;
                    turns += 1;
                }
                turns
            })
        },
    );
    assert_eq!(turns, TURNS);
}

/// A parked executor arms the latency ring with its next user timer (here a minute away)
/// instead of a preempt timer. Woken early by something else (a blocking-pool job), it must
/// not take that timer for a fresh preempt timer and keep it: the next task queue would run
/// for a minute without being told to yield.
#[test]
fn a_user_timer_armed_while_parked_is_not_kept_as_the_preempt_timer() {
    const TURNS: usize = 5;
    let turns = on_executor(
        Duration::from_millis(100),
        Duration::from_secs(30),
        "the task queue was not told to yield: a user timer served as preempt timer",
        |executor| {
            executor.run(async {
                glommio::spawn_local(glommio::timer::sleep(Duration::from_secs(60))).detach();
                let mut turns = 0;
                for _ in 0..TURNS {
                    glommio::executor()
                        .spawn_blocking(|| std::thread::sleep(Duration::from_millis(2)))
                        .await;
                    spin_until_told_to_yield().await;
                    turns += 1;
                }
                turns
            })
        },
    );
    assert_eq!(turns, TURNS);
}

/// A preempt timer too slow to wake a parked executor within the tests' bounds: a preempt
/// timer kept across a park (vendor/README.md) would otherwise wake it and hide a lost
/// user timer.
const SLOW_PREEMPT: Duration = Duration::from_secs(40);

/// A parked executor keeps the user timer it armed while that one fires no later than the
/// earliest timer due (vendor/README.md). A sooner timer made afterwards must still be armed
/// in its place: here the executor parks with a minute-away timer armed, wakes for a
/// blocking-pool job, then waits on a 50 ms timer with nothing else to wake it.
#[test]
fn a_sooner_timer_replaces_the_armed_one() {
    on_executor(
        SLOW_PREEMPT,
        Duration::from_secs(20),
        "a 50 ms timer did not fire: the executor slept on the minute-away timer armed before",
        |executor| {
            executor.run(async {
                glommio::spawn_local(glommio::timer::sleep(Duration::from_secs(60))).detach();
                glommio::executor()
                    .spawn_blocking(|| std::thread::sleep(Duration::from_millis(20)))
                    .await;
                glommio::timer::sleep(Duration::from_millis(50)).await;
            })
        },
    );
}

/// The other way round: the timer armed at a park is dropped unfired (a read that came in
/// before its timeout), so the executor parks next with an earlier timer armed than it needs.
/// It wakes for nothing when that fires, and must then arm the timer that is due.
#[test]
fn a_timer_still_fires_after_an_earlier_armed_one_was_dropped() {
    let (slept, order) = on_executor(
        SLOW_PREEMPT,
        Duration::from_secs(20),
        "a 300 ms timer did not fire after an earlier one armed for it was dropped",
        |executor| {
            executor.run(async {
                let started = std::time::Instant::now();
                let later = glommio::spawn_local(glommio::timer::sleep(Duration::from_millis(300)));
                let dropped = glommio::timer::sleep(Duration::from_millis(100));
                let job = glommio::executor()
                    .spawn_blocking(|| std::thread::sleep(Duration::from_millis(20)));
                let first = futures_lite::future::or(
                    async {
                        job.await;
                        "job"
                    },
                    async {
                        dropped.await;
                        "timer"
                    },
                )
                .await;
                later.await;
                (started.elapsed(), first)
            })
        },
    );
    assert_eq!(
        order, "job",
        "the 20 ms job finishes before the 100 ms timer"
    );
    assert!(slept >= Duration::from_millis(300), "slept {slept:?}");
}

#[test]
fn an_idle_executor_sleeps_instead_of_spinning() {
    let cpu = cpu_used_sleeping(LocalExecutorBuilder::default(), Duration::from_millis(500));
    // Sleeping costs a few wake-ups; a loop that never parks burns the whole 500 ms.
    assert!(
        cpu < Duration::from_millis(150),
        "the executor used {cpu:?} of CPU while it had nothing to do for 500 ms"
    );
}

/// The broker's cores poll for a while before they park (`serve --idle-poll-us`, glommio's
/// `spin_before_park`), yielding the CPU at each turn. The poll counts from the last work
/// run: an executor whose only task sleeps polls once, for that long, then parks. A poll
/// that restarted at each empty turn would burn the whole sleep.
#[test]
fn an_idle_executor_that_polls_before_parking_still_sleeps() {
    // glommio polls only on an executor bound to CPUs, as the broker's cores are.
    let cpu = core_affinity::get_core_ids()
        .and_then(|ids| ids.first().map(|id| id.id))
        .expect("this process may run on some CPU");
    let polling = LocalExecutorBuilder::new(Placement::Fixed(cpu))
        .spin_before_park(pagurus::config::IDLE_POLL_MAX);
    let used = cpu_used_sleeping(polling, Duration::from_secs(2));
    // One poll of 10 ms, then a park. Polling throughout costs the whole 2 s on a quiet
    // machine; since the poll yields, a busy one gives it less, but not less than a share
    // of a CPU: at 4 threads wanting each CPU, 500 ms.
    assert!(
        used < Duration::from_millis(150),
        "the executor used {used:?} of CPU while it had nothing to do for 2 s"
    );
}

/// CPU time an executor made by `builder` (preempt timer 1 ms) uses while its only task
/// sleeps for `sleep`.
fn cpu_used_sleeping(builder: LocalExecutorBuilder, sleep: Duration) -> Duration {
    let worker = std::thread::spawn(move || {
        let executor = builder
            .preempt_timer(Duration::from_millis(1))
            .make()
            .expect("an executor");
        executor.run(async {
            let before = thread_cpu();
            glommio::timer::sleep(sleep).await;
            thread_cpu() - before
        })
    });
    worker.join().expect("the worker thread")
}

/// CPU time this thread has used.
fn thread_cpu() -> Duration {
    let usage = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_THREAD)
        .expect("getrusage");
    let micros = |t: nix::sys::time::TimeVal| t.tv_sec() as u64 * 1_000_000 + t.tv_usec() as u64;
    Duration::from_micros(micros(usage.user_time()) + micros(usage.system_time()))
}

/// An executor that parks must be woken by whatever another thread hands it while it goes
/// to sleep. The vendored glommio pairs two SeqCst fences for that (one where the executor
/// announces it sleeps, one where a sender checks whether to write its eventfd) instead of
/// a `membarrier` at every park: if the pair were wrong, a message could land in the
/// channel just after the executor's last look and it would sleep on it for ever.
///
/// Two executors play ping-pong across a glommio shared channel, each parking between
/// messages, with no timer armed that could wake a forgotten sleeper: a lost wake-up
/// hangs the test until its bound.
#[test]
fn a_message_from_another_executor_always_wakes_a_parked_one() {
    const ROUND_TRIPS: u64 = 50_000;
    use glommio::channels::shared_channel;
    let (ping_tx, ping_rx) = shared_channel::new_bounded::<u64>(1);
    let (pong_tx, pong_rx) = shared_channel::new_bounded::<u64>(1);
    let (done, wait_done) = mpsc::channel();
    let echo = std::thread::spawn(move || {
        LocalExecutorBuilder::default()
            .make()
            .expect("an executor")
            .run(async move {
                let (rx, tx) = (ping_rx.connect().await, pong_tx.connect().await);
                while let Some(n) = rx.recv().await {
                    if tx.send(n + 1).await.is_err() {
                        break;
                    }
                }
            })
    });
    let pinger = std::thread::spawn(move || {
        let last = LocalExecutorBuilder::default()
            .make()
            .expect("an executor")
            .run(async move {
                let (tx, rx) = (ping_tx.connect().await, pong_rx.connect().await);
                let mut n = 0;
                for _ in 0..ROUND_TRIPS {
                    tx.send(n).await.expect("the echo executor runs");
                    n = rx.recv().await.expect("the echo executor answers");
                }
                n
            });
        done.send(last).expect("the test waits");
    });
    let last = wait_done
        .recv_timeout(Duration::from_secs(60))
        .expect("an executor slept through a message sent to it: a lost wake-up");
    assert_eq!(last, ROUND_TRIPS);
    pinger.join().expect("the pinging thread");
    echo.join().expect("the echo thread");
}

/// The same handshake wakes an executor parked on a job of its blocking pool (the
/// `spawn_blocking` jobs that storage runs its syncs and renames on).
#[test]
fn a_blocking_pool_result_always_wakes_a_parked_executor() {
    const JOBS: usize = 50_000;
    let jobs = on_executor(
        Duration::from_millis(100),
        Duration::from_secs(60),
        "the executor slept through a finished blocking-pool job: a lost wake-up",
        |executor| {
            executor.run(async {
                let mut jobs = 0;
                for _ in 0..JOBS {
                    jobs += glommio::executor().spawn_blocking(|| 1).await;
                }
                jobs
            })
        },
    );
    assert_eq!(jobs, JOBS);
}
