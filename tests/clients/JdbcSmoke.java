// JDBC smoke check against a running Apiary server with TPC-H loaded: connects with the
// PostgreSQL JDBC driver, reads metadata (getTables, getColumns), runs a query and a
// prepared statement. Run by crates/server/tests/clients.rs, or by hand:
//
//   bash tests/clients/setup.sh        # the driver jar from Maven Central
//   apiary serve --tpch 0.01 --port 5433 &
//   java -cp tests/clients/lib/postgresql-42.7.14.jar tests/clients/JdbcSmoke.java \
//        "jdbc:postgresql://127.0.0.1:5433/apiary?user=apiary"

import java.math.BigDecimal;
import java.sql.Connection;
import java.sql.DatabaseMetaData;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;

public class JdbcSmoke {
    static void check(boolean condition, String what) {
        if (!condition) {
            throw new AssertionError(what);
        }
    }

    public static void main(String[] args) throws Exception {
        try (Connection conn = DriverManager.getConnection(args[0])) {
            DatabaseMetaData meta = conn.getMetaData();
            check(meta.getDatabaseProductVersion().startsWith("15"), "version " + meta.getDatabaseProductVersion());
            List<String> tables = new ArrayList<>();
            try (ResultSet rs = meta.getTables(null, "public", "%", new String[] {"TABLE"})) {
                while (rs.next()) {
                    tables.add(rs.getString("TABLE_NAME"));
                }
            }
            check(tables.contains("lineitem") && tables.contains("nation"), "getTables: " + tables);
            List<String> columns = new ArrayList<>();
            try (ResultSet rs = meta.getColumns(null, "public", "orders", "%")) {
                while (rs.next()) {
                    columns.add(rs.getString("COLUMN_NAME") + ":" + rs.getString("TYPE_NAME") + ":" + rs.getInt("ORDINAL_POSITION"));
                }
            }
            check(columns.size() == 9 && columns.get(0).equals("o_orderkey:int4:1") && columns.get(3).equals("o_totalprice:numeric:4"),
                    "getColumns: " + columns);
            try (Statement st = conn.createStatement();
                    ResultSet rs = st.executeQuery(
                            "SELECT n_name, count(*) AS suppliers FROM nation JOIN supplier ON s_nationkey = n_nationkey "
                                    + "GROUP BY n_name ORDER BY suppliers DESC, n_name LIMIT 3")) {
                int rows = 0;
                while (rs.next()) {
                    check(rs.getLong("suppliers") > 0, "count");
                    rows++;
                }
                check(rows == 3, "query rows " + rows);
            }
            try (PreparedStatement ps = conn.prepareStatement(
                    "SELECT count(*), sum(l_extendedprice) FROM lineitem WHERE l_quantity < ? AND l_shipmode = ?")) {
                // Run it more than prepareThreshold (5) times: the driver switches to a
                // named server-side prepared statement.
                long first = -1;
                for (int i = 0; i < 7; i++) {
                    ps.setBigDecimal(1, new BigDecimal("10"));
                    ps.setString(2, "MAIL");
                    try (ResultSet rs = ps.executeQuery()) {
                        check(rs.next(), "a row");
                        long count = rs.getLong(1);
                        check(first == -1 || count == first, "same answer each time");
                        first = count;
                        check(rs.getBigDecimal(2) != null, "sum");
                    }
                }
                check(first > 0, "prepared count " + first);
            }
        }
        System.out.println("jdbc: ok");
    }
}
