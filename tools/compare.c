/* placesim compare: a simulated trace against a measured one (step time, per-op errors, plots). */
#include <math.h>
#include <stdio.h>

#include "placesim/timeline.h"
#include "tools/cli.h"

int psim_cmd_compare(int argc, char **argv)
{
    gboolean json = FALSE;
    g_autofree char *plot = NULL;
    g_autofree char *top_text = NULL;
    int64_t top = 20;
    GOptionEntry entries[] = {
        {"plot", 0, 0, G_OPTION_ARG_FILENAME, &plot,
         "Write the Gantt charts side by side and the per-op scatter to FILE (.png or .svg)", "FILE"},
        {"top", 0, 0, G_OPTION_ARG_STRING, &top_text, "Rows of the per-op error table (default 20)", "N"},
        {"json", 0, 0, G_OPTION_ARG_NONE, &json, "Print one JSON object with the figures", NULL},
        {NULL}};
    g_autoptr(GOptionContext) ctx =
        g_option_context_new("SIM_TRACE RUN_TRACE - compare a simulated step with a measured one");
    g_option_context_set_summary(ctx, "Both traces are Chrome trace JSON written by 'placesim sim --trace'\n"
                                      "and 'placesim run --trace' for the same plan; ops are matched by name.");
    g_option_context_add_main_entries(ctx, entries, NULL);
    if (!psim_cli_parse(ctx, &argc, &argv, "compare"))
        return 2;
    if (argc != 3)
        return psim_cli_usage("compare", "expected SIM_TRACE and RUN_TRACE");
    GError *err = NULL;
    if (!psim_cli_flag_int("--top", top_text, 0, G_MAXINT32, &top, &err))
        return psim_cli_fail(err);
    g_autoptr(PsimTimeline) sim = psim_timeline_load_chrome(argv[1], &err);
    if (!sim)
        return psim_cli_fail(err);
    g_autoptr(PsimTimeline) run = psim_timeline_load_chrome(argv[2], &err);
    if (!run)
        return psim_cli_fail(err);
    PsimCompare c;
    if (!psim_timeline_compare(sim, run, &c, &err)) {
        /* Its only failure is the measured trace's (no step time): name that file. */
        g_prefix_error(&err, "%s: ", argv[2]);
        return psim_cli_fail(err);
    }
    g_autoptr(PsimCliOutputs) outs = psim_cli_outputs_new();
    const char *tmp = NULL;
    if (plot && (!(tmp = psim_cli_output(outs, plot, FALSE, &err)) ||
                 !psim_compare_plot(sim, run, &c, tmp, &err) || !psim_cli_outputs_commit(outs, &err))) {
        psim_compare_clear(&c);
        return psim_cli_fail(err);
    }
    if (json) {
        JsonBuilder *b = json_builder_new();
        json_builder_begin_object(b);
        json_builder_set_member_name(b, "sim_us");
        json_builder_add_double_value(b, c.sim_step_us);
        json_builder_set_member_name(b, "measured_us");
        json_builder_add_double_value(b, c.run_step_us);
        json_builder_set_member_name(b, "error_pct");
        json_builder_add_double_value(b, c.error_pct);
        json_builder_set_member_name(b, "matched_ops");
        json_builder_add_int_value(b, c.n_matched);
        json_builder_set_member_name(b, "only_sim");
        json_builder_add_int_value(b, c.n_only_sim);
        json_builder_set_member_name(b, "only_run");
        json_builder_add_int_value(b, c.n_only_run);
        json_builder_set_member_name(b, "median_abs_op_error_pct");
        json_builder_add_double_value(b, c.median_abs_op_error_pct);
        json_builder_set_member_name(b, "ops");
        json_builder_begin_array(b);
        for (int32_t i = 0; i < c.n_rows && i < top; i++) {
            json_builder_begin_object(b);
            json_builder_set_member_name(b, "name");
            json_builder_add_string_value(b, c.rows[i].name);
            json_builder_set_member_name(b, "op");
            json_builder_add_string_value(b, c.rows[i].op);
            json_builder_set_member_name(b, "sim_us");
            json_builder_add_double_value(b, c.rows[i].sim_us);
            json_builder_set_member_name(b, "measured_us");
            json_builder_add_double_value(b, c.rows[i].run_us);
            json_builder_end_object(b);
        }
        json_builder_end_array(b);
        json_builder_end_object(b);
        psim_cli_print_json(b);
    } else {
        printf("step time   simulated %.1f us   measured %.1f us   error %+.2f%%\n", c.sim_step_us,
               c.run_step_us, c.error_pct);
        printf("ops         %d matched, %d only simulated, %d only measured; median |error| %.1f%% "
               "(ops >= 10 us)\n", c.n_matched, c.n_only_sim, c.n_only_run, c.median_abs_op_error_pct);
        printf("op time     simulated %.1f us   measured %.1f us (sum over ops)\n", c.sum_sim_us, c.sum_run_us);
        if (c.n_rows && top) {
            printf("\n%-40s %-18s %12s %12s %9s\n", "node (largest errors first)", "op", "sim us", "measured us", "error");
            for (int32_t i = 0; i < c.n_rows && i < top; i++) {
                const PsimCompareRow *r = &c.rows[i];
                double e = r->run_us > 0 ? 100 * (r->sim_us - r->run_us) / r->run_us : NAN;
                printf("%-40.40s %-18.18s %12.2f %12.2f %+8.1f%%\n", r->name, r->op, r->sim_us, r->run_us, e);
            }
        }
        if (plot)
            printf("\nplot: %s\n", plot);
    }
    psim_compare_clear(&c);
    return 0;
}
